"""Before/after retrieval adaptation on held-out questions: recall@k, answer recall, and Iter-RetGen quality.

    python -m training.evaluate_adapted retrieval_adapt/configs/evaluate_world.yaml \\
        --query_encoder runs/retrieval_adapt/world-distill/query_encoder

Writes under ``output_dir``: ``report.json`` (recall tables and Iter-RetGen curves per retriever), ``report.md``
(the same as Markdown tables), ``iter_retgen_<retriever>.jsonl`` (one record per question, every iteration) and
``config.yaml``. Without ``query_encoder`` only the base retriever is evaluated (an Iter-RetGen T-curve alone).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config, save_config
from data_builders.question_loader import QuestionsConfig, check_dataset, load_questions
from inference.commands.eval_checks import check_index_folder, check_model_name, check_output_dir
from inference.dynamic_rag.methods import PRESETS
from inference.iter_retgen.loop import IterRetGen, IterRetGenConfig, LMGenerator, iteration_curve
from inference.iter_retgen.prompts import PromptStyle
from retrieval_adapt.dense import DenseRetriever, check_query_encoder
from retrieval_adapt.recall import recall_table

CURVE_KEYS = ("answer_recall", "gold_recall", "em", "f1", "acc")


@dataclass
class EvaluateAdaptedConfig:
    index: str = field(default="runs/index/world-minilm", metadata={"aliases": ["--index_dir"]})
    query_encoder: str | None = field(default=None, metadata={"help": "adapted query encoder folder"})
    output_dir: str = field(default="runs/retrieval_adapt/world-eval", metadata={"aliases": ["--out"]})
    recall_ks: list[int] = field(default_factory=lambda: [1, 5, 10])
    # Iter-RetGen with each retriever
    run_iter_retgen: bool = True
    iter_retgen_limit: int | None = field(default=None, metadata={"help": "first N held-out questions only"})
    iter_retgen_retrievers: list[str] = field(default_factory=lambda: ["base", "adapted"])  # which to run it with
    # the language model that answers in the Iter-RetGen runs
    model: str = field(default="smollm2-135m", metadata={"aliases": ["--generator"]})
    prompt_style: PromptStyle = "chat"
    iterations: int = 3  # one T=3 run gives the T=1, 2, 3 numbers (greedy, deterministic)
    top_k: int = PRESETS["iter-retgen"].top_k  # paragraphs retrieved per iteration (the method's preset: 5)
    max_new_tokens: int = 32
    gen_batch_size: int = 16
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"

    RENAMED: ClassVar[dict[str, str]] = {"k": "top_k (paragraphs retrieved per iteration)"}

    def __post_init__(self) -> None:
        if not self.recall_ks or min(self.recall_ks) < 1:
            raise ValueError(f"recall_ks must be positive integers, got {self.recall_ks}")
        unknown = set(self.iter_retgen_retrievers) - {"base", "adapted"}
        if unknown:
            raise ValueError(f"iter_retgen_retrievers: unknown {sorted(unknown)} (base, adapted)")
        if self.iterations < 1 or self.top_k < 1:
            raise ValueError(f"iterations and top_k must be >= 1, got {self.iterations}, {self.top_k}")


def load_retrievers(cfg: EvaluateAdaptedConfig) -> dict:
    out = {"base": DenseRetriever.load(cfg.index)}
    if cfg.query_encoder:
        out["adapted"] = DenseRetriever.load(cfg.index, query_encoder=cfg.query_encoder)
    return out


def run_iter_retgen(retrievers: dict, examples, cfg: EvaluateAdaptedConfig, out: Path, generator=None) -> dict:
    """Iter-RetGen with every retriever (one generator, loaded once); records saved per retriever."""
    generator = generator or LMGenerator.from_name(cfg.model, dtype=cfg.dtype, max_new_tokens=cfg.max_new_tokens,
                                                   batch_size=cfg.gen_batch_size, show_progress=True)
    loop_cfg = IterRetGenConfig(iterations=cfg.iterations, top_k=cfg.top_k, prompt_style=cfg.prompt_style)
    curves, timing = {}, {}
    for name, retriever in retrievers.items():
        start = time.perf_counter()
        records = IterRetGen(retriever, generator, loop_cfg).run(examples, show_progress=True)
        timing[name] = round(time.perf_counter() - start, 1)
        with (out / f"iter_retgen_{name}.jsonl").open("w") as f:
            for rec in records:
                f.write(json.dumps(rec.to_dict(), ensure_ascii=False) + "\n")
        curves[name] = iteration_curve(records)
    return {"curves": curves, "wall_s": timing}


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def markdown_report(report: dict) -> str:
    lines = ["## Retrieval on held-out questions (query = question)", ""]
    recall = report["recall"]
    keys = list(next(iter(recall.values())))
    lines += ["| retriever | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(_fmt(row[k]) for k in keys) + " |" for name, row in recall.items()]
    if "iter_retgen" in report:
        lines += ["", f"## Iter-RetGen (top_k={report['top_k']}, n={report['n_iter_retgen']}; answer recall and gold "
                      "recall of the retrieved set, EM/F1/contained accuracy of y_T)", ""]
        lines += ["| retriever | T | " + " | ".join(CURVE_KEYS) + " |", "|---" * (len(CURVE_KEYS) + 2) + "|"]
        for name, curve in report["iter_retgen"]["curves"].items():
            for row in curve:
                lines.append(f"| {name} | {row['t']} | " + " | ".join(_fmt(row.get(k, float('nan')))
                                                                    for k in CURVE_KEYS) + " |")
    return "\n".join(lines) + "\n"


def check_inputs(qcfg: QuestionsConfig, cfg: EvaluateAdaptedConfig, *, retrievers_given: bool = False,
                 generator_given: bool = False) -> None:
    """Everything the evaluation reads, checked before OUT is created: a mistake ends in one line, no folder."""
    check_dataset(qcfg.question_set(), qcfg.dataset_format)
    check_output_dir(cfg.output_dir, flag="--output_dir")
    if not retrievers_given:
        check_index_folder(cfg.index, flag="--index")
        if cfg.query_encoder:
            check_model_name(cfg.query_encoder, flag="--query_encoder")
            check_query_encoder(cfg.index, cfg.query_encoder)  # a wrong size, from headers and config
    if cfg.run_iter_retgen and not generator_given:
        check_model_name(cfg.model, flag="--model")


def evaluate(qcfg: QuestionsConfig, cfg: EvaluateAdaptedConfig, *, retrievers: dict | None = None,
             generator=None) -> dict:
    check_inputs(qcfg, cfg, retrievers_given=retrievers is not None, generator_given=generator is not None)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_config(out / "config.yaml", qcfg, cfg)
    examples = load_questions(qcfg.question_set(), fmt=qcfg.dataset_format, world=qcfg.world())
    retrievers = retrievers or load_retrievers(cfg)
    start = time.perf_counter()
    per_question: dict[str, dict] = {name: {} for name in retrievers}
    report: dict = {"n_questions": len(examples), "top_k": cfg.top_k,
                    "recall": {name: recall_table(r, examples, tuple(cfg.recall_ks), per_question=per_question[name])
                               for name, r in retrievers.items()}}
    # per question, in the order of "ids": intervals over questions (inference.commands.knowing_claims)
    report["per_question"] = {"ids": [ex.id for ex in examples], **per_question}
    if cfg.run_iter_retgen:
        subset = examples[: cfg.iter_retgen_limit] if cfg.iter_retgen_limit else examples
        report["n_iter_retgen"] = len(subset)
        chosen = {name: r for name, r in retrievers.items() if name in cfg.iter_retgen_retrievers}
        report["iter_retgen"] = run_iter_retgen(chosen, subset, cfg, out, generator)
    report["wall_s"] = round(time.perf_counter() - start, 1)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(markdown_report(report))
    return report


def main(argv: list[str] | None = None) -> None:
    qcfg, cfg = parse_config((QuestionsConfig, EvaluateAdaptedConfig), argv,
                             prog="python -m training.evaluate_adapted")
    report = evaluate(qcfg, cfg)
    print(markdown_report(report))
    print(f"wrote {cfg.output_dir}/report.json in {report['wall_s']}s")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_cli(main, resume_hint="the report is written at the end, so nothing was; rerun the same command")


if __name__ == "__main__":
    sys.exit(cli())
