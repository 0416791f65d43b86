"""ADAPT-LLM training data (the paper's Algorithm 1) as a Hugging Face ``DatasetDict``.

    python -m data_builders.adapt_llm                                    # the embedded world, SmolLM2
    python -m data_builders.adapt_llm my.yaml --limit 200                # YAML, then overrides
    python -m data_builders.adapt_llm --dataset ../shared/data/squad/dev-v1.1.json --data_dir runs/squad

For every question the base model (``base_model``: a model setting,
:class:`~adaptive_rag.lm.base_model.BaseModelConfig`) answers closed-book (NR prompt). Judged correct -> one
``parametric_prompt`` instance whose completion is the gold answer (``parametric_target: closed_book``: the
model's own accepted answer); wrong -> one ``parametric_prompt``
instance whose completion is ``<RET>`` and one ``context_prompt`` instance with the gold passage and the
gold answer. Output in ``data_dir``: ``dataset/`` (train/validation, columns ``prompt``, ``completion``,
``kind``, ``question_id``; both instances of a question in the same split), ``stats.json``,
``config.yaml`` and the resumable ``closed_book.jsonl``.

``mode`` chooses what is trained on the same questions: ``adapt`` (Algorithm 1, above), ``nr`` (every question
with the closed-book prompt "answer the question Q" -> gold answer: the paper's NR-LLM, never retrieving) or ``ar``
(every question with its gold passage in the ``context_prompt`` -> gold answer: AR-LLM, always retrieving); the
paper's baselines are such separately trained models (its ``train.py --mode``). nr and ar ask no closed-book
answers. A gold passage longer than ``max_passage_words`` keeps a window around the answer
(:func:`data_builders.adapt_llm_prompts.answer_window`); ``stats.json`` counts ``passages_cut`` and
``passages_recentred``.

Questions (a :class:`~adaptive_rag.plumbing.question_set.QuestionSet`: ``dataset``, ``split``, ``start``, ``limit``,
``shuffle_seed``): ``world-adapt-train`` (default: the training part of the embedded world's fictional single-hop
and common-knowledge questions; :func:`data_builders.adapt_world.world_split` holds out the rest,
``world-adapt-heldout``, for evaluation) or any QA file that ships gold passages (canonical JSONL, SQuAD, NQ with
passages, ...). By default a seeded sample (``shuffle_seed`` 0); ``shuffle_seed: null`` keeps the file's order.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from datasets import Dataset, DatasetDict, Features, Value, load_from_disk

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.atomic_files import atomic_folder, write_text_atomic
from adaptive_rag.plumbing.cards import check_repo_id, push_to_hub, write_dataset_card
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config, save_config
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.metrics import contained_accuracy, exact_match
from adaptive_rag.plumbing.progress import library_bars_quiet
from adaptive_rag.plumbing.question_set import QuestionSet
from adaptive_rag.plumbing.record_log import FolderLock
from adaptive_rag.plumbing.records import QAExample
from data_builders.adapt_closed_book import ClosedBookFn, answer_closed_book, model_closed_book_fn
from data_builders.adapt_llm_prompts import (
    RET_TOKEN,
    PromptVariant,
    answer_window,
    context_prompt,
    never_retrieve_prompt,
    parametric_prompt,
)
from data_builders.question_loader import WorldOptions, load_questions
from data_builders.readers import QA_FORMATS

logger = logging.getLogger(__name__)

JudgeName = Literal["contains", "exact_match"]
TrainingMode = Literal["adapt", "nr", "ar"]
MODES: tuple[str, ...] = ("adapt", "nr", "ar")
Judge = Callable[[str, Sequence[str]], bool]
COLUMNS = ("prompt", "completion", "kind", "question_id")
KINDS = ("parametric_answer", "parametric_ret", "context", "never_retrieve")


@dataclass
class AdaptDataConfig:
    """Algorithm 1 settings. Field names are unique across the ADAPT-LLM configs, so one YAML can hold them all."""

    data_dir: str = "runs/adapt_llm/data"  # output folder (and resume state)
    # What to train: adapt (Algorithm 1: answer or <RET>), nr (closed-book prompt -> gold answer, never retrieves)
    # or ar (gold passage in the context prompt -> gold answer, always retrieves). Each needs its own data_dir
    # and output_dir.
    mode: TrainingMode = "adapt"
    # The training questions: world-adapt-train or a QA file with gold passages
    dataset: str = "world-adapt-train"
    dataset_format: str | None = None  # a readers.QAFormat name; null = detect from the file
    split: str | None = None  # a hub dataset's split (dataset_format hf)
    start: int = 0  # first question of the (shuffled) set
    limit: int | None = None  # at most this many questions; null = all
    # A seeded sample: a file's first questions can be a handful of articles (SQuAD is grouped by article);
    # null keeps the file's order. world-adapt-train draws its own seeded sample (adapt_world.world_sample).
    shuffle_seed: int | None = 0
    world_seed: int = 0
    heldout_fraction: float = 0.2  # world: share of questions kept out of training for evaluation
    world_common_fraction: float | None = None  # world: share of common-knowledge questions; null = natural mix
    closed_book_dtype: str = "auto"
    closed_book_batch_size: int = 16
    closed_book_max_new_tokens: int = 20  # the authors' evaluation generates 20 tokens
    judge: JudgeName = "contains"  # "contains": any gold answer in the output (PopQA's metric, the authors')
    judge_normalize: bool = True  # SQuAD-normalise before "contains"; false = raw case-insensitive substring
    prompt_variant: PromptVariant = "paper"
    # Completion of a correct question's parametric instance: the gold answer (Algorithm 1), or the model's own
    # closed-book answer that the judge accepted (keeps a small model's answer style, which carries its recall).
    parametric_target: Literal["gold", "closed_book"] = "gold"
    # cut long gold passages so the instance stays inside max_length; the kept window holds the answer
    max_passage_words: int | None = 200
    validation_fraction: float = 0.1  # share of questions (with all their instances) in the validation split
    # A number of instances drawn at random for validation instead (the authors: alpaca-lora's val_set_size 2000,
    # train_test_split over instances, so a question's two instances may fall on either side); null: the fraction
    validation_size: int | None = None
    data_seed: int = 0
    push_dataset_to_hub: str | None = None  # Hub dataset repo ORG/NAME: upload data_dir (with its card) when built

    RENAMED: ClassVar[dict[str, str]] = {
        "source": "dataset (world is now world-adapt-train)", "source_format": "dataset_format",
        "source_limit": "limit", "source_shuffle": "shuffle_seed (true: shuffle_seed 0; false: shuffle_seed null)"}

    def __post_init__(self) -> None:
        self.question_set()  # an old name, a bad slice: one line now
        if self.world_common_fraction is not None and not 0.0 <= self.world_common_fraction <= 1.0:
            raise ValueError(f"world_common_fraction must be in [0, 1] or null, got {self.world_common_fraction}")
        for name in ("heldout_fraction", "validation_fraction"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("closed_book_batch_size", "closed_book_max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.validation_size is not None and self.validation_size < 0:
            raise ValueError(f"validation_size must be >= 0 or null, got {self.validation_size}")
        if self.max_passage_words is not None and self.max_passage_words < 1:
            raise ValueError(f"max_passage_words must be >= 1 or null, got {self.max_passage_words}")
        if self.dataset_format is not None and self.dataset_format not in QA_FORMATS:
            raise ValueError(f"dataset_format must be one of {list(QA_FORMATS)} or null, got '{self.dataset_format}'")
        if self.parametric_target not in ("gold", "closed_book"):
            raise ValueError(f"parametric_target must be 'gold' or 'closed_book', got '{self.parametric_target}'")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got '{self.mode}'")
        if self.judge not in ("contains", "exact_match"):
            raise ValueError(f"judge must be 'contains' or 'exact_match', got '{self.judge}'")
        if self.push_dataset_to_hub is not None:
            check_repo_id(self.push_dataset_to_hub)

    def question_set(self) -> QuestionSet:
        return QuestionSet.of(self)

    def world(self) -> WorldOptions:
        """The embedded world and its train/held-out split (``data_seed`` decides which facts are held out)."""
        return WorldOptions(seed=self.world_seed, heldout_fraction=self.heldout_fraction, heldout_seed=self.data_seed,
                            common_fraction=self.world_common_fraction)

    def labeller(self, model: BaseModelConfig) -> dict[str, Any]:
        """What determines a closed-book answer (``model`` answers): a resumed file must have been written with the
        same."""
        return {"model": model.base_model, "prompt_variant": self.prompt_variant,
                "max_new_tokens": self.closed_book_max_new_tokens, "extraction": "response_text"}


def make_judge(name: JudgeName = "contains", normalize: bool = True) -> Judge:
    """Algorithm 1's ``ans = gold_ans`` made explicit. ``exact_match`` always SQuAD-normalises."""
    if name == "contains":
        return lambda pred, golds: contained_accuracy(pred, list(golds), normalize=normalize) > 0
    if name == "exact_match":
        return lambda pred, golds: exact_match(pred, list(golds)) > 0
    raise ValueError(f"unknown judge '{name}' (contains, exact_match)")


def load_source(cfg: AdaptDataConfig) -> list[QAExample]:
    """The questions Algorithm 1 runs over; every one must carry gold passages."""
    examples = load_questions(cfg.question_set(), fmt=cfg.dataset_format, world=cfg.world())
    missing = [ex.id for ex in examples if not ex.gold_passages]
    if missing:
        raise DataError(f"{len(missing)} of {len(examples)} questions have no gold passages (first: {missing[:3]}). "
                        "Algorithm 1 needs gold passages for its context_prompt instances: use SQuAD, NQ with "
                        "passages, canonical JSONL with gold_passages, or the world; PopQA and NQ-open ship none",
                        source=cfg.dataset)
    return examples


def gold_context_prompt(ex: QAExample, variant: PromptVariant = "paper", max_passage_words: int | None = None) -> str:
    """The context instance's prompt: the question with its gold passages, each cut around the answer."""
    passages = [answer_window(p, max_passage_words, ex.answers).text for p in ex.gold_passages]
    return context_prompt(ex.question, passages, variant)


def algorithm1(examples: Sequence[QAExample], answers: dict[str, str], judge: Judge,
               variant: PromptVariant = "paper", max_passage_words: int | None = None,
               parametric_target: str = "gold") -> list[dict[str, str]]:
    """The paper's Algorithm 1 over closed-book ``answers`` (id -> text): one row per instance."""
    rows: list[dict[str, str]] = []
    for ex in examples:
        gold = ex.answers[0]  # the canonical answer; the judge accepts any alias
        question_prompt = parametric_prompt(ex.question, variant)
        if judge(answers[ex.id], ex.answers):
            target = answers[ex.id] if parametric_target == "closed_book" else gold
            rows.append({"prompt": question_prompt, "completion": target, "kind": "parametric_answer",
                         "question_id": ex.id})
            continue
        rows.append({"prompt": question_prompt, "completion": RET_TOKEN, "kind": "parametric_ret",
                     "question_id": ex.id})
        rows.append({"prompt": gold_context_prompt(ex, variant, max_passage_words),
                     "completion": gold, "kind": "context", "question_id": ex.id})
    return rows


def baseline_rows(examples: Sequence[QAExample], mode: str, variant: PromptVariant = "paper",
                  max_passage_words: int | None = None) -> list[dict[str, str]]:
    """The paper's separately trained baselines: one instance per question with the gold answer as completion;
    ``nr``: the closed-book prompt ("answer the question Q"), ``ar``: the context prompt with the gold passage."""
    if mode == "nr":
        return [{"prompt": never_retrieve_prompt(ex.question, variant), "completion": ex.answers[0],
                 "kind": "never_retrieve", "question_id": ex.id} for ex in examples]
    if mode == "ar":
        return [{"prompt": gold_context_prompt(ex, variant, max_passage_words), "completion": ex.answers[0],
                 "kind": "context", "question_id": ex.id} for ex in examples]
    raise ValueError(f"baseline mode must be nr or ar, got '{mode}'")


def passage_cut_stats(examples: Sequence[QAExample], max_passage_words: int | None) -> dict[str, int]:
    """Over context instances (one per example): how many had a passage cut, how many had one recentred on the
    answer (a cut to the first words would have lost it), and how many gold passages hold no gold answer at all."""
    counts = Counter()
    for ex in examples:
        cuts = [answer_window(p, max_passage_words, ex.answers) for p in ex.gold_passages]
        counts["passages_cut"] += any(c.cut for c in cuts)
        counts["passages_recentred"] += any(c.recentred for c in cuts)
        whole = " ".join(" ".join(p.text.split()) for p in ex.gold_passages).lower()
        counts["answer_not_in_passages"] += not any(" ".join(a.split()).lower() in whole for a in ex.answers)
    return {k: counts[k] for k in ("passages_cut", "passages_recentred", "answer_not_in_passages")}


def split_rows(rows: list[dict[str, str]], validation_fraction: float, seed: int,
               validation_size: int | None = None) -> DatasetDict:
    """Train/validation by question (a question's two instances never straddle the split), seeded; with
    ``validation_size``, that many instances drawn at random (the authors' split; all of them when there are fewer,
    less one so training keeps an instance)."""
    if validation_size is not None:
        order = list(range(len(rows)))
        random.Random(f"adapt-validation:{seed}").shuffle(order)
        val_rows = set(order[:min(validation_size, max(0, len(rows) - 1))])
        parts = {"train": [r for i, r in enumerate(rows) if i not in val_rows],
                 "validation": [r for i, r in enumerate(rows) if i in val_rows]}
    else:
        qids = sorted({r["question_id"] for r in rows})
        random.Random(f"adapt-validation:{seed}").shuffle(qids)
        val_ids = set(qids[:int(len(qids) * validation_fraction)])
        parts = {"train": [r for r in rows if r["question_id"] not in val_ids],
                 "validation": [r for r in rows if r["question_id"] in val_ids]}
    features = Features({c: Value("string") for c in COLUMNS})
    return DatasetDict({name: Dataset.from_dict({c: [r[c] for r in part] for c in COLUMNS}, features=features)
                        for name, part in parts.items()})


def check_schema(dsd: DatasetDict) -> None:
    """trl's prompt/completion contract plus our two bookkeeping columns; raises DataError on a violation."""
    if set(dsd) != {"train", "validation"}:
        raise DataError(f"expected splits train and validation, got {sorted(dsd)}")
    if len(dsd["train"]) == 0:
        raise DataError("the train split is empty")
    for name, ds in dsd.items():
        if tuple(ds.column_names) != COLUMNS:
            raise DataError(f"split {name}: expected columns {list(COLUMNS)}, got {ds.column_names}")
        for i, row in enumerate(ds):
            if not all(isinstance(row[c], str) and row[c] for c in COLUMNS):
                raise DataError(f"split {name}: empty or non-string field", record=i)
            if row["kind"] not in KINDS:
                raise DataError(f"split {name}: kind '{row['kind']}' not in {KINDS}", record=i)


def source_sha256(examples: Sequence[QAExample]) -> str:
    blob = json.dumps([ex.to_dict() for ex in examples], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _common_stats(cfg: AdaptDataConfig, model: BaseModelConfig, examples: Sequence[QAExample],
                  rows: list[dict[str, str]], dsd: DatasetDict) -> dict[str, Any]:
    context_ids = {r["question_id"] for r in rows if r["kind"] == "context"}
    cuts = passage_cut_stats([ex for ex in examples if ex.id in context_ids], cfg.max_passage_words)
    return {"mode": cfg.mode, "questions": len(examples), "instances": len(rows),
            "train_instances": len(dsd["train"]), "validation_instances": len(dsd["validation"]),
            "max_passage_words": cfg.max_passage_words, **cuts, "base_model": model.base_model,
            "prompt_variant": cfg.prompt_variant, "dataset": cfg.dataset, "source_sha256": source_sha256(examples)}


def _stats(cfg: AdaptDataConfig, model: BaseModelConfig, examples: Sequence[QAExample], rows: list[dict[str, str]],
           answers: dict[str, str], judge: Judge, dsd: DatasetDict) -> dict[str, Any]:
    kinds = Counter(r["kind"] for r in rows)
    groups: dict[str, Counter] = {}
    for ex in examples:  # per metadata kind (world: fictional / common), to see what the model knows
        c = groups.setdefault(str(ex.metadata.get("kind", "all")), Counter())
        c["questions"] += 1
        c["correct"] += int(judge(answers[ex.id], ex.answers))
    return {**_common_stats(cfg, model, examples, rows, dsd), "correct": kinds["parametric_answer"],
            "closed_book_accuracy": kinds["parametric_answer"] / len(examples),
            "parametric_answer_instances": kinds["parametric_answer"], "ret_instances": kinds["parametric_ret"],
            "context_instances": kinds["context"], "by_group": {k: dict(v) for k, v in sorted(groups.items())},
            "judge": cfg.judge, "judge_normalize": cfg.judge_normalize, "parametric_target": cfg.parametric_target}


def _baseline_stats(cfg: AdaptDataConfig, model: BaseModelConfig, examples: Sequence[QAExample],
                    rows: list[dict[str, str]], dsd: DatasetDict) -> dict[str, Any]:
    kinds = Counter(r["kind"] for r in rows)
    return {**_common_stats(cfg, model, examples, rows, dsd), "never_retrieve_instances": kinds["never_retrieve"],
            "context_instances": kinds["context"]}


def check_data_dir_mode(data_dir: str | Path, mode: str) -> None:
    """One data_dir holds one mode's dataset: refuse to overwrite another's (a model trained from it would then
    be resumed on the wrong instances)."""
    stats_path = Path(data_dir) / "stats.json"
    if not stats_path.is_file():
        return
    saved = json.loads(stats_path.read_text(encoding="utf-8")).get("mode", "adapt")
    if saved != mode:
        raise DataError(f"holds the mode '{saved}' dataset, not '{mode}'; give each mode its own data_dir "
                        "(and output_dir)", source=str(data_dir))


def save_dataset(dsd: DatasetDict, out: Path) -> None:
    """Publish the dataset only when complete (:func:`atomic_folder`): an interrupted save never leaves half a
    dataset behind. Empty splits are left out (datasets 5 cannot load an empty split back);
    :func:`load_adapt_dataset` restores them."""
    with atomic_folder(out) as tmp, library_bars_quiet():
        DatasetDict({name: ds for name, ds in dsd.items() if len(ds)}).save_to_disk(str(tmp))


def load_adapt_dataset(data_dir: str | Path) -> DatasetDict:
    """The DatasetDict :func:`build_adapt_dataset` wrote to ``data_dir``, with both splits, schema-checked."""
    path = Path(data_dir) / "dataset"
    if not path.is_dir():
        raise FileNotFoundError(f"no Algorithm 1 dataset in {data_dir}; run python -m data_builders.adapt_llm first")
    dsd = load_from_disk(str(path))
    features = Features({c: Value("string") for c in COLUMNS})
    for name in ("train", "validation"):
        if name not in dsd:
            dsd[name] = Dataset.from_dict({c: [] for c in COLUMNS}, features=features)
    check_schema(dsd)
    return dsd


def build_adapt_dataset(cfg: AdaptDataConfig, answer_fn: ClosedBookFn | None = None, judge: Judge | None = None,
                        show_progress: bool = True, *, model: BaseModelConfig | None = None) -> DatasetDict:
    """Run Algorithm 1 for ``cfg`` and write everything to ``cfg.data_dir``; returns the DatasetDict.

    ``model`` is the base model that answers closed-book (default :class:`BaseModelConfig`'s). ``answer_fn``
    (closed-book answers for a batch) and ``judge`` default to that model and ``cfg.judge``; tests pass stubs.
    """
    model = model or BaseModelConfig()
    out = Path(cfg.data_dir)
    check_data_dir_mode(out, cfg.mode)
    examples = load_source(cfg)
    with FolderLock(out):  # one builder per data_dir: two would ask every question twice
        return _build_locked(cfg, model, out, examples, answer_fn, judge, show_progress)


def _build_locked(cfg: AdaptDataConfig, model: BaseModelConfig, out: Path, examples: list[QAExample],
                  answer_fn: ClosedBookFn | None, judge: Judge | None, show_progress: bool) -> DatasetDict:
    if cfg.mode == "adapt":
        answer_fn = answer_fn or model_closed_book_fn(model.base_model, cfg.prompt_variant,
                                                      cfg.closed_book_max_new_tokens, cfg.closed_book_batch_size,
                                                      cfg.closed_book_dtype)
        judge = judge or make_judge(cfg.judge, cfg.judge_normalize)
        answers = answer_closed_book(examples, answer_fn, out / "closed_book.jsonl", cfg.labeller(model),
                                     cfg.closed_book_batch_size, show_progress)
        rows = algorithm1(examples, answers, judge, cfg.prompt_variant, cfg.max_passage_words, cfg.parametric_target)
    else:  # the baselines need no closed-book pass
        rows = baseline_rows(examples, cfg.mode, cfg.prompt_variant, cfg.max_passage_words)
    dsd = split_rows(rows, cfg.validation_fraction, cfg.data_seed, cfg.validation_size)
    check_schema(dsd)
    save_dataset(dsd, out / "dataset")
    if cfg.mode == "adapt":
        stats = _stats(cfg, model, examples, rows, answers, judge, dsd)
    else:
        stats = _baseline_stats(cfg, model, examples, rows, dsd)
    write_text_atomic(out / "stats.json", json.dumps(stats, indent=2) + "\n")
    save_config(out / "config.yaml", model, cfg)
    write_dataset_card(out, stats, (model, cfg))
    logger.info("%s data: %s", cfg.mode, {k: v for k, v in stats.items() if k != "by_group"})
    if stats["passages_recentred"]:
        logger.info("%d of %d context instances had a passage cut; %d kept a window around the answer that the "
                    "first %s words would have lost", stats["passages_cut"], stats["context_instances"],
                    stats["passages_recentred"], cfg.max_passage_words)
    return dsd


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg, model = parse_config((AdaptDataConfig, BaseModelConfig), argv, prog="python -m data_builders.adapt_llm")
    dsd = build_adapt_dataset(cfg, model=model)
    if cfg.push_dataset_to_hub:
        push_to_hub(cfg.data_dir, cfg.push_dataset_to_hub, repo_type="dataset")
    stats = json.loads((Path(cfg.data_dir) / "stats.json").read_text())
    if cfg.mode == "adapt":
        summary = (f"{stats['questions']} questions, {stats['correct']} answered correctly closed-book; "
                   f"{stats['ret_instances']} <RET> and {stats['context_instances']} context instances")
    else:
        summary = f"mode {cfg.mode}: {stats['questions']} questions, {stats['instances']} instances"
    print(f"{summary}; {stats['passages_cut']} passages cut ({stats['passages_recentred']} around the answer); "
          f"train {len(dsd['train'])}, validation {len(dsd['validation'])} -> {cfg.data_dir}")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
