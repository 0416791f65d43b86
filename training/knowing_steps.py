"""The knowing model's stages: trl SFT (full or LoRA), then closed-book labels per fact and per entity.

Used by ``python -m training.knowing_model``; every stage writes its files atomically and is skipped when they exist.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from adaptive_rag.lm.generation import generate_texts
from adaptive_rag.lm.models import ModelOptions, load_causal_lm
from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.metrics import contained_accuracy
from data_builders.adapt_llm_prompts import never_retrieve_prompt, response_text
from data_builders.knowing_world import KnowingWorld, build_knowing_world, replay_split, statements
from data_builders.source_files import iter_jsonl
from data_builders.world import WorldConfig
from data_builders.world_questions import bridge
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

logger = logging.getLogger(__name__)
TINY_WORLD = WorldConfig(n_people=8, n_places=3, n_orgs=4, n_works=4, n_distractors=2, n_single=0, n_bridge=0,
                         n_comparison=0)


@dataclass
class KnowingConfig:
    # the build folder (question sets look for runs/knowing/seed<seed>)
    output_dir: str = field(default="runs/knowing/seed0", metadata={"aliases": ["--out"]})
    seed: int = 0  # the world's seed: its entities, the trained sample, the held-out wordings
    n_trained: int = 50  # entities the model is trained on (kind-stratified sample of the 300 core entities)
    tiny: bool = False  # a world of ~25 entities (tests): pair it with a tiny base_model
    base_model: str = "smollm2-135m"
    finetune: Literal["full", "lora"] = "full"  # full: every weight; lora: r lora_r on all linear layers
    # facts: the registered mix (passages, statements, chat Q&A, replay). reasoning: teach a knowing model given as
    # base_model to answer DRAGIN's few-shot prompt in sentences (docs/knowing_world.md, "The reasoning variant"):
    # each trained fact as "<statement> So the answer is <a>." and tuning-half bridges whose hops are both trained as
    # two statements, in the paper prompt with reasoning_demos of the world's demos, plus the replay
    training_mix: Literal["facts", "reasoning"] = "facts"
    reasoning_demos: int = 1
    lora_r: int = 16
    num_train_epochs: float = field(default=3.0, metadata={"aliases": ["--epochs"]})
    learning_rate: float = 1e-4  # the probe's; LoRA needs ~10x more
    batch_size: int = 8
    max_steps: int = -1  # > 0 caps the steps (tests)
    save_steps: int = 50  # a checkpoint every this many steps (resume point)
    replay: bool = True  # train on the base model's own answers to half the common-knowledge questions
    n_common: int | None = None  # use only the first n common-knowledge questions (None: all 168; tests: a few)
    train_wordings: int | None = None  # chat Q&A in at most this many training wordings per fact (None: all)
    # label every fact (None), or the trained ones and a seeded sample of this many untrained open facts (a loaded
    # machine; the bridge and comparison sets then keep only questions whose facts were labelled)
    label_untrained: int | None = None
    label_batch_size: int = 16
    max_new_tokens: int = 16  # closed-book answers are short phrases
    dtype: str = "auto"  # training precision: auto = bf16 autocast where the CPU has fast bf16, else fp32

    def __post_init__(self) -> None:
        if self.finetune not in ("full", "lora"):
            raise ValueError(f"finetune must be full or lora, got {self.finetune!r}")
        if self.num_train_epochs <= 0 or self.batch_size < 1 or self.learning_rate <= 0:
            raise ValueError("num_train_epochs, batch_size and learning_rate must be positive")
        if self.n_trained < 1:
            raise ValueError(f"n_trained must be >= 1, got {self.n_trained}")
        if self.training_mix not in ("facts", "reasoning"):
            raise ValueError(f"training_mix must be facts or reasoning, got {self.training_mix!r}")
        if self.reasoning_demos < 1:
            raise ValueError(f"reasoning_demos must be >= 1, got {self.reasoning_demos}")

    def knowing_world(self) -> KnowingWorld:
        if self.tiny:
            return build_knowing_world(self.seed, self.n_trained, WorldConfig(**{**asdict(TINY_WORLD),
                                                                                 "seed": self.seed}))
        return build_knowing_world(self.seed, self.n_trained)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    """The build's own files (a torn or hand-edited line is a DataError naming its line)."""
    return [row for _, row in iter_jsonl(path)]


def chat_answers(model, tokenizer, questions: list[str], cfg: KnowingConfig, desc: str) -> list[str]:
    """Greedy closed-book answers in the evaluation's chat prompt (inference.dynamic_rag.prompts, no documents)."""

    builder = PromptBuilder(tokenizer)
    logger.info("%s: %d questions", desc, len(questions))
    out = generate_texts(model, tokenizer, [builder.build(q, []).text for q in questions],
                         max_new_tokens=cfg.max_new_tokens, batch_size=cfg.label_batch_size, show_progress=True,
                         stop_at_newline=True)
    return [g.text for g in out]


def paper_answers(model, tokenizer, questions: list[str], cfg: KnowingConfig) -> list[str]:
    """Closed-book answers in ADAPT-LLM's never-retrieve (Alpaca) prompt."""

    out = generate_texts(model, tokenizer, [never_retrieve_prompt(q) for q in questions],
                         max_new_tokens=cfg.max_new_tokens, batch_size=cfg.label_batch_size, show_progress=True)
    return [response_text(g.text) for g in out]


def build_replay(cfg: KnowingConfig, out: Path) -> list[dict]:
    """The base model's answers to every common-knowledge question (the replayed half trains, the other measures)."""
    path = out / "replay.jsonl"
    if path.is_file():
        return read_jsonl(path)

    model, tokenizer = load_causal_lm(cfg.base_model, ModelOptions(dtype="auto"))
    replayed, held = replay_split(cfg.seed, cfg.n_common)
    examples = replayed + held
    answers = chat_answers(model, tokenizer, [ex.question for ex in examples], cfg, "base model, common knowledge")
    rows = [{"id": ex.id, "question": ex.question, "answers": ex.answers, "base_answer": a,
             "base_correct": contained_accuracy(a, ex.answers), "replayed": i < len(replayed)}
            for i, (ex, a) in enumerate(zip(examples, answers))]
    _write_jsonl(path, rows)
    return rows


def training_texts(kw: KnowingWorld, replay: list[dict], tokenizer, use_replay: bool = True,
                   max_wordings: int | None = None) -> tuple[list[str], list[str]]:
    """(prompts, completions): passages and statements as plain text (empty prompt), Q&A in the chat prompt."""

    builder = PromptBuilder(tokenizer)
    prompts, completions = [], []
    for p in kw.world.passages:
        if p.id in kw.trained_pids:
            prompts.append("")
            completions.append(p.text)
    for fact in kw.facts:
        if not fact.trained:
            continue
        for s in statements(fact):
            prompts.append("")
            completions.append(s)
        for wording in fact.train_wordings[:max_wordings]:
            prompts.append(builder.build(wording.format(x=fact.entity.name), []).text)
            completions.append(fact.answers[0])
    _add_replay(prompts, completions, replay if use_replay else [], builder)
    return prompts, completions


def reasoning_texts(kw: KnowingWorld, replay: list[dict], tokenizer, demos: int,
                    use_replay: bool = True) -> tuple[list[str], list[str]]:
    """(prompts, completions) that teach answering DRAGIN's few-shot prompt in sentences, from trained facts only:
    each trained fact in one training wording answered "<statement> So the answer is <a>.", and every tuning-half
    bridge whose two hops are trained facts answered with both statements (evaluation-half bridges are never
    trained); the replayed chat answers keep the chat format."""
    builder = PromptBuilder(tokenizer, PromptConfig(prompt_style="paper", demos="world", num_demos=demos))
    rng = random.Random(f"knowing:{kw.world.config.seed}:reasoning")
    prompts, completions = [], []
    for fact in kw.facts:
        if fact.trained and fact.train_wordings:
            prompts.append(builder.build(rng.choice(fact.train_wordings).format(x=fact.entity.name), []).text)
            completions.append(f" {rng.choice(statements(fact))} So the answer is {fact.answers[0]}.")
    core = [e for e in kw.world.entities if e.core]
    passages = {p.id: p for p in kw.world.passages}
    names = {e.name: e for e in core}
    for ex in bridge(core, passages, 100_000, rng):
        subject, mid = names[ex.metadata["entity"]], names[ex.metadata["intermediate"]]
        hops = [kw.fact(e.pid, r) for e, r in zip((subject, mid), ex.metadata["relations"])]
        if all(h is not None and h.trained for h in hops) and hops[0].group == "tune":
            said = " ".join(rng.choice(statements(h)) for h in hops)
            prompts.append(builder.build(ex.question, []).text)
            completions.append(f" {said} So the answer is {ex.answers[0]}.")
    _add_replay(prompts, completions, replay if use_replay else [], PromptBuilder(tokenizer))
    return prompts, completions


def _add_replay(prompts: list[str], completions: list[str], replay: list[dict], chat: PromptBuilder) -> None:
    """The base model's own chat answers to the replayed common-knowledge questions."""
    for row in replay:
        if row["replayed"] and row["base_answer"].strip():
            prompts.append(chat.build(row["question"], []).text)
            completions.append(row["base_answer"])
