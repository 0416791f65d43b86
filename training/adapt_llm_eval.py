"""The evaluation that closes the ADAPT-LLM job: NR vs AR vs ADAPT-LLM (and a ``<RET>``-probability threshold
sweep) with the trained model on questions never used in training.

One ``sweep`` pass generates the three answers every policy needs (parametric with p(<RET>), NR, context);
NR, AR and ADAPT-LLM are then decided from the same greedy generations (:func:`inference.adapt_gate.redecide`),
which is what running them one by one would produce, at a third of the cost.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from data_builders.adapt_llm import AdaptDataConfig
from data_builders.adapt_world import world_split
from inference.adapt_gate import (
    AdaptGate,
    GateConfig,
    format_table,
    model_generator,
    redecide,
    summarize,
    sweep_threshold,
)
from inference.core.config import ConfigError
from inference.core.records import DataError, QAExample
from training.adapt_llm_config import AdaptEvalConfig

logger = logging.getLogger(__name__)


def check_eval_inputs(data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig) -> int:
    """What the evaluation after training reads, checked before anything loads (a mistake here would otherwise
    surface only after Algorithm 1 and training): the questions are readable (they are read: a PopQA-sized file
    takes a moment) and the index folder is an index. Returns the number of questions."""
    from inference.eval_checks import check_index_folder

    examples = eval_questions(data_cfg, eval_cfg)
    if not examples:
        raise DataError("no questions to evaluate on", source=eval_cfg.eval_source)
    if eval_cfg.eval_index != "world":
        check_index_folder(eval_cfg.eval_index, flag="--eval_index")
    return len(examples)


def eval_questions(data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig) -> list[QAExample]:
    if eval_cfg.eval_source == "world_heldout":
        if data_cfg.source != "world":
            raise ConfigError("eval_source world_heldout needs source world (else the held-out part is undefined): "
                              "set --eval_source to a QA file")
        _, examples = world_split(data_cfg.world_seed, data_cfg.heldout_fraction, data_cfg.data_seed)
    else:
        from data_builders.readers import read_qa

        examples = read_qa(eval_cfg.eval_source, format=eval_cfg.eval_format)
    return examples[:eval_cfg.eval_limit] if eval_cfg.eval_limit else examples


def eval_retriever(data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig):
    if eval_cfg.eval_index == "world":
        from data_builders.world import WorldConfig, build_world
        from retrieval_adapt.bm25 import BM25Retriever

        return BM25Retriever.build(build_world(WorldConfig(seed=data_cfg.world_seed)).passages, show_progress=False)
    from retrieval_adapt.loading import load_retriever

    return load_retriever(eval_cfg.eval_index)


def gate_config(data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig) -> GateConfig:
    return GateConfig(policy="sweep", gate_rule=eval_cfg.gate_rule, ret_threshold=eval_cfg.ret_threshold,
                      k=eval_cfg.eval_k, prompt_variant=data_cfg.prompt_variant,
                      max_passage_words=data_cfg.max_passage_words, judge=data_cfg.judge,
                      judge_normalize=data_cfg.judge_normalize)


def load_for_eval(model_dir: str, dtype: str = "auto"):
    """The trained adapter as the gate will be used: base + adapter, merged in memory for faster generation."""
    from inference.core.models import ModelOptions, load_causal_lm

    model, tokenizer = load_causal_lm(model_dir, ModelOptions(dtype=dtype))
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    return model.eval(), tokenizer


def evaluate_gate(model: Any, tokenizer: Any, data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig,
                  out_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the sweep pass, decide NR / AR / ADAPT-LLM, write records and summaries to ``out_dir``; returns
    ``{"table": str, "summaries": {...}, "sweep": [...]}``."""
    examples = eval_questions(data_cfg, eval_cfg)
    cfg = gate_config(data_cfg, eval_cfg)
    # three prompt sets (parametric, NR, context), a bar each: a PopQA-sized evaluation runs for many minutes
    generate = model_generator(model, tokenizer, eval_cfg.eval_batch_size, eval_cfg.eval_max_new_tokens,
                               show_progress=True)
    records = AdaptGate(generate, eval_retriever(data_cfg, eval_cfg), cfg).run(examples, "sweep")
    decided = {"NR (never retrieve)": redecide(records, "never_retrieve", cfg),
               "AR (always retrieve)": redecide(records, "always_retrieve", cfg),
               f"ADAPT-LLM ({cfg.gate_rule})": redecide(records, "adapt_llm", cfg)}
    by_kind: dict[str, dict[str, Any]] = {}
    kinds = {ex.id: str(ex.metadata.get("kind", "all")) for ex in examples}
    for kind in sorted(set(kinds.values())):  # world: fictional vs common, where the gate should differ
        for name, recs in decided.items():
            by_kind[f"{name.split(' ')[0]} [{kind}]"] = summarize([r for r in recs if kinds[r.question_id] == kind])
    summaries = {name: summarize(recs) for name, recs in decided.items()}
    sweep = sweep_threshold(records, eval_cfg.sweep_thresholds, cfg)
    table = format_table({**summaries, **by_kind})
    sweep_table = format_table({f"p(<RET>) > {row['threshold']:.2f}": row for row in sweep})
    result = {"table": table, "sweep_table": sweep_table, "summaries": summaries, "by_kind": by_kind, "sweep": sweep}
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with (out / "records.jsonl").open("w", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps({**asdict(rec), "kind": kinds[rec.question_id]}, ensure_ascii=False) + "\n")
        (out / "summary.json").write_text(json.dumps({k: v for k, v in result.items() if "table" not in k},
                                                     indent=2) + "\n")
        (out / "table.txt").write_text(table + "\n\n" + sweep_table + "\n")
    return result
