"""Distillation data for Iter-RetGen's generation-augmented retrieval adaptation.

For each training question: run Iter-RetGen's iteration 1 (``top_k`` paragraphs in its prompt) to get y1; retrieve
``num_candidates`` paragraphs with the current dense retriever (the pool the teacher re-ranks and the student learns
to rank); score each with the re-ranker, which sees the question AND y1. Writes:

    OUT/rows.jsonl      one row per finished question (data_builders.distill_schema), appended per batch: the
                       resume log (adaptive_rag.plumbing.record_log.RecordLog)
    OUT/dataset/       DatasetDict(train, validation): question_id, question, answers, gold_ids, y1, y1_answer,
                       candidate_ids, candidate_positions (rows of the index), teacher_scores, retriever_scores
    OUT/stats.json     counts, teacher/retriever quality on gold passages, source hashes, wall times
    OUT/config.yaml    the resolved configuration

    python -m training.distill_set retrieval_adapt/configs/data_world.yaml
    python -m training.distill_set retrieval_adapt/configs/data_world.yaml --limit 20 --output_dir runs/tmp

Resumable: a rerun with the same OUT skips the question ids already in rows.jsonl (a row half-written when a
run died is dropped and redone). Changing a setting that changes the rows requires a fresh OUT
(:func:`~adaptive_rag.plumbing.record_log.check_same_settings`); ``start`` and ``limit`` may change.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from tqdm.auto import tqdm

from adaptive_rag.lm.models import resolve_model
from adaptive_rag.plumbing.atomic_files import atomic_folder, write_text_atomic
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import config_dict, parse_config, save_config
from adaptive_rag.plumbing.record_log import FolderLock, RecordLog, check_same_settings
from adaptive_rag.plumbing.records import QAExample
from adaptive_rag.plumbing.retriever import join_query
from adaptive_rag.plumbing.wandb_logging import check_report_to, log_run
from data_builders.distill_schema import check_row, to_dataset_dict
from data_builders.question_loader import QuestionsConfig, check_dataset, file_hash, load_questions, source_hash
from inference.commands.eval_checks import check_index_folder, check_model_name, check_output_dir
from inference.dynamic_rag.methods import PRESETS
from inference.iter_retgen.loop import IterRetGen, IterRetGenConfig, LMGenerator
from inference.iter_retgen.prompts import PromptStyle
from retrieval_adapt.dense import DenseRetriever, check_query_encoder
from retrieval_adapt.rerankers import LLMReranker, RerankItem, build_reranker

logger = logging.getLogger(__name__)

# Fields that change speed, not content, or only which questions run: a resumed run may change them. output_dir:
# the folder itself, reached by another path (absolute, relative) or moved, holds the same rows.
RUNTIME_FIELDS = frozenset({"gen_batch_size", "rerank_batch_size", "batch_size", "show_progress", "report_to",
                            "start", "limit", "output_dir"})


@dataclass
class RetrievalAdaptDataConfig:
    # Retriever whose query encoder will be adapted (an index folder built by retrieval_adapt.build_index)
    index: str = field(default="runs/index/world-minilm", metadata={"aliases": ["--index_dir"]})
    query_encoder: str | None = None  # None: the index's own encoder
    # The candidate pool per question: what the teacher re-ranks and the student learns to rank. Eq. 3 normalises
    # both distributions over D_{y1||q}, the paragraphs retrieved with y1 and the question: candidate_query
    # question_y1 and, null, the top_k paragraphs of that retrieval. A larger pool (an int) gives the student
    # more to rank; candidate_query question retrieves the pool with the question alone (this project's earlier
    # default).
    num_candidates: int | None = field(default=None, metadata={
        "help": "candidate paragraphs per question that the re-ranker scores and distillation ranks; null: top_k "
                "(the paper's D)"})
    candidate_query: Literal["question", "question_y1"] = "question_y1"  # what retrieves the candidates
    # The language model that writes y1 (Iter-RetGen iteration 1)
    model: str = field(default="smollm2-135m", metadata={"aliases": ["--generator"]})
    prompt_style: PromptStyle = "chat"
    top_k: int = PRESETS["iter-retgen"].top_k  # paragraphs retrieved for y1's prompt (the method's preset: 5)
    max_new_tokens: int = 32
    gen_batch_size: int = 16
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # Re-ranker (teacher)
    reranker: Literal["llm", "cross_encoder"] = "llm"
    reranker_model: str = "smollm2-135m"  # a cross-encoder: hub id or path (e.g. a TART/MS MARCO model)
    llm_score: Literal["answer_logprob", "yes_logprob"] = "answer_logprob"
    reranker_uses_y1: bool = True  # the paper's point: the re-ranker sees y1
    rerank_batch_size: int = 16
    # Output
    output_dir: str = field(default="runs/retrieval_adapt/world-data", metadata={"aliases": ["--out"]})
    validation_fraction: float = 0.1  # paper: 9k train / 1k validation
    split_seed: int = 0
    batch_size: int = 16  # questions per resumable chunk
    show_progress: bool = True
    report_to: str = "none"  # wandb: log the resolved config and stats (offline without an API key)

    RENAMED: ClassVar[dict[str, str]] = {"k": "top_k (paragraphs retrieved for y1's prompt)"}

    def pool_size(self) -> int:
        """Candidates per question: ``num_candidates``, or the top_k paragraphs of the paper's D."""
        return self.num_candidates if self.num_candidates is not None else self.top_k

    def __post_init__(self) -> None:
        if self.num_candidates is not None and self.num_candidates < 2:
            raise ValueError(f"num_candidates must be >= 2 (a distribution needs two), got {self.num_candidates}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}")
        check_report_to(self.report_to)
        for name in ("top_k", "max_new_tokens", "gen_batch_size", "rerank_batch_size", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def candidate_rows(examples: list[QAExample], y1s: list[str], y1_answers: list[str], retriever, reranker,
                   cfg: RetrievalAdaptDataConfig, position: dict[str, int]) -> list[dict]:
    """Candidates (retrieved with q or y1+q), their re-ranker scores, and provenance, one row per question."""
    queries = [ex.question if cfg.candidate_query == "question" else join_query(ex.question, y)
               for ex, y in zip(examples, y1s)]
    hits = retriever.search(queries, cfg.pool_size())
    items = [RerankItem(ex.question, y, [h.passage for h in row], list(ex.answers))
             for ex, y, row in zip(examples, y1s, hits)]
    teacher = reranker.score_batch(items)
    return [{
        "question_id": ex.id, "question": ex.question, "answers": list(ex.answers),
        "gold_ids": [p.id for p in ex.gold_passages], "y1": y, "y1_answer": ya,
        "candidate_ids": [h.passage.id for h in row], "candidate_positions": [position[h.passage.id] for h in row],
        "teacher_scores": scores, "retriever_scores": [h.score for h in row],
    } for ex, y, ya, row, scores in zip(examples, y1s, y1_answers, hits, teacher)]


def row_log(out: Path) -> RecordLog:
    """``rows.jsonl``: one row per finished question, every row checked against the schema."""
    return RecordLog(out / "rows.jsonl", key="question_id", check=check_row)


def check_resume(out: Path, cfg: RetrievalAdaptDataConfig, qcfg: QuestionsConfig) -> None:
    """Refuse to append to rows made with different content settings."""
    if (out / "rows.jsonl").is_file():
        check_same_settings(out / "config.yaml", config_dict(qcfg, cfg), RUNTIME_FIELDS, what="rows")


def _entropy(scores: list[float]) -> float:
    m = max(scores)
    exp = [math.exp(s - m) for s in scores]
    z = sum(exp)
    return -sum(e / z * math.log(e / z) for e in exp if e > 0)


def row_stats(rows: list[dict[str, Any]]) -> dict[str, float]:
    """How good the candidates and the teacher are, measured on gold passages where the data has them.

    ``gold_in_candidates``: share of gold passages among the candidates; ``teacher_top1_gold`` /
    ``retriever_top1_gold``: share of questions whose top candidate by the re-ranker / by the retriever is gold;
    ``teacher_entropy``: mean entropy (nats) of softmax(teacher scores) at temperature 1.
    """
    n = len(rows)
    with_gold = [r for r in rows if r["gold_ids"]]

    def top1_gold(r: dict[str, Any], col: str) -> float:
        best = max(range(len(r[col])), key=lambda i: r[col][i])
        return float(r["candidate_ids"][best] in set(r["gold_ids"]))

    out: dict[str, float] = {"n_questions": n,
                             "mean_candidates": sum(len(r["candidate_ids"]) for r in rows) / max(n, 1),
                             "teacher_entropy": sum(_entropy(r["teacher_scores"]) for r in rows) / max(n, 1)}
    if with_gold:
        g = len(with_gold)
        out["gold_in_candidates"] = sum(len(set(r["gold_ids"]) & set(r["candidate_ids"])) / len(r["gold_ids"])
                                        for r in with_gold) / g
        out["teacher_top1_gold"] = sum(top1_gold(r, "teacher_scores") for r in with_gold) / g
        out["retriever_top1_gold"] = sum(top1_gold(r, "retriever_scores") for r in with_gold) / g
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


def _score_kind(cfg: RetrievalAdaptDataConfig, models) -> str:
    """What the stored teacher scores are (retrieval_adapt.rerankers.Reranker.score_kind): the distillation reads
    Eq. 3's relevance probability back from them."""
    if models is not None:
        return getattr(models[2], "score_kind", "log_probability")
    if cfg.reranker == "llm":
        return "log_probability"
    from transformers import AutoConfig

    one_logit = AutoConfig.from_pretrained(resolve_model(cfg.reranker_model)).num_labels == 1
    return "logit" if one_logit else "log_probability"


def _load_models(cfg: RetrievalAdaptDataConfig):
    retriever = DenseRetriever.load(cfg.index, query_encoder=cfg.query_encoder)
    generator = LMGenerator.from_name(cfg.model, dtype=cfg.dtype, max_new_tokens=cfg.max_new_tokens,
                                      batch_size=cfg.gen_batch_size)
    if cfg.reranker == "llm" and cfg.reranker_model == cfg.model:  # one copy of the model is enough
        reranker = LLMReranker(generator.model, generator.tokenizer, mode=cfg.llm_score,
                               use_y1=cfg.reranker_uses_y1, batch_size=cfg.rerank_batch_size)
    else:
        reranker = build_reranker(cfg.reranker, cfg.reranker_model, mode=cfg.llm_score, use_y1=cfg.reranker_uses_y1,
                                  batch_size=cfg.rerank_batch_size, dtype=cfg.dtype)
    loop_cfg = IterRetGenConfig(iterations=1, top_k=cfg.top_k, prompt_style=cfg.prompt_style)
    loop = IterRetGen(retriever, generator, loop_cfg)
    return retriever, loop, reranker


def check_inputs(qcfg: QuestionsConfig, cfg: RetrievalAdaptDataConfig, *, models_given: bool = False) -> None:
    """Everything the builder reads, checked before OUT is created: a mistake ends in one line and leaves no
    folder (a config.yaml written first would bind a later, correct run to the wrong settings)."""
    check_dataset(qcfg.question_set(), qcfg.dataset_format)
    check_output_dir(cfg.output_dir, flag="--output_dir")
    if not models_given:  # test doubles replace the index and the models
        check_index_folder(cfg.index, cfg.query_encoder, flag="--index")
        if cfg.query_encoder:  # a wrong size, from headers and config, before any weights load
            check_query_encoder(cfg.index, cfg.query_encoder)
        check_model_name(cfg.model, flag="--model")
        if not (cfg.reranker == "llm" and cfg.reranker_model == cfg.model):
            check_model_name(cfg.reranker_model, flag="--reranker_model")


def build(qcfg: QuestionsConfig, cfg: RetrievalAdaptDataConfig, *, models=None):
    """Run (or resume) the builder; ``models`` = (retriever, IterRetGen loop, reranker) injects test doubles.
    The output folder is locked for the run: a second builder on it fails at once instead of mixing its rows in."""
    check_inputs(qcfg, cfg, models_given=models is not None)
    out = Path(cfg.output_dir)
    with FolderLock(out):
        return _build(out, qcfg, cfg, models)


def _build(out: Path, qcfg: QuestionsConfig, cfg: RetrievalAdaptDataConfig, models):
    check_resume(out, cfg, qcfg)
    save_config(out / "config.yaml", qcfg, cfg)
    examples = load_questions(qcfg.question_set(), fmt=qcfg.dataset_format, world=qcfg.world())
    log = row_log(out)
    done = log.keys()
    todo = [ex for ex in examples if ex.id not in done]
    logger.info("%d questions, %d already done, %d to build", len(examples), len(examples) - len(todo), len(todo))
    timings = {"generate_s": 0.0, "rerank_s": 0.0}
    if todo:
        retriever, loop, reranker = models or _load_models(cfg)
        position = {p.id: i for i, p in enumerate(retriever.passages)}  # candidate id -> row of embeddings.npy
        batches = range(0, len(todo), cfg.batch_size)
        for s in tqdm(batches, desc="questions", unit="batch", disable=not cfg.show_progress,
                      total=math.ceil(len(todo) / cfg.batch_size)):
            chunk = todo[s:s + cfg.batch_size]
            t0 = time.perf_counter()
            first = [rec.iterations[0] for rec in loop.run(chunk)]
            t1 = time.perf_counter()
            rows = candidate_rows(chunk, [it.output for it in first], [it.answer for it in first], retriever,
                                  reranker, cfg, position)
            timings["generate_s"] += t1 - t0
            timings["rerank_s"] += time.perf_counter() - t1
            log.append(rows)  # a finished batch survives any later crash
    wanted = {ex.id for ex in examples}
    rows = [r for r in log.read() if r["question_id"] in wanted]
    dataset = to_dataset_dict(rows, cfg.validation_fraction, cfg.split_seed)
    # Written beside and renamed into place: a kill mid-save never leaves a dataset/ that loads half.
    with atomic_folder(out / "dataset") as tmp:
        dataset.save_to_disk(str(tmp))
    stats = {**row_stats(rows), "teacher_score_kind": _score_kind(cfg, models),
             "n_train": len(dataset["train"]), "n_validation": len(dataset["validation"]),
             "built_this_run": len(todo), "questions_sha256": source_hash(qcfg.question_set(), qcfg.world()),
             "index_passages_sha256": file_hash(Path(cfg.index) / "passages.jsonl"),
             **{f"this_run_{k}": round(v, 2) for k, v in timings.items()}}
    write_text_atomic(out / "stats.json", json.dumps(stats, indent=2) + "\n")
    return dataset, stats


def main(argv: list[str] | None = None) -> None:
    qcfg, cfg = parse_config((QuestionsConfig, RetrievalAdaptDataConfig), argv,
                             prog="python -m training.distill_set")
    start = time.perf_counter()
    _, stats = build(qcfg, cfg)
    print(json.dumps(stats, indent=2))
    log_run(cfg.report_to, job="retrieval-adapt-data", name=Path(cfg.output_dir).name, config=config_dict(qcfg, cfg),
            metrics=stats)
    print(f"wrote {cfg.output_dir}/dataset in {time.perf_counter() - start:.1f}s")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
