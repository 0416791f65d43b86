"""The evaluation that closes the ADAPT-LLM job: NR vs AR vs ADAPT-LLM (and a ``<RET>``-probability threshold
sweep) with the trained model on questions never used in training.

It is the evaluate command's own path (:func:`inference.commands.evaluate.evaluate_examples`, ``--method adapt-llm
--gate_all_answers true`` on the loaded model), so ``output_dir/eval`` holds what every evaluation folder holds:
``predictions.jsonl`` (per question, the three answers every policy needs: parametric with p(<RET>), NR, context),
``metrics.json`` (ADAPT-LLM's decision) and ``config.yaml``. NR, AR and ADAPT-LLM are then decided from those same
greedy generations (:func:`inference.adapt_gate.gate.redecide`), which is what running them one by one would produce, at
a third of the cost, into ``summary.json`` and ``table.txt``. A new evaluation replaces the folder's predictions:
they belong to the adapter trained before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adaptive_rag.lm import models
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.question_set import QuestionSet
from adaptive_rag.plumbing.records import QAExample
from data_builders.adapt_llm import AdaptDataConfig
from data_builders.question_loader import load_questions
from data_builders.world import WorldConfig, build_world
from inference.adapt_gate.gate import GateConfig, format_table, redecide, summarize, sweep_threshold
from inference.adapt_gate.gate_eval import GateMethodConfig, gate_record, gate_runner
from inference.commands.eval_checks import check_index_folder
from inference.commands.eval_folder import read_done
from inference.commands.evaluate import EvalConfig, evaluate_examples
from inference.dynamic_rag.engine import EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptConfig
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.loading import load_retriever
from training.adapt_llm_config import AdaptEvalConfig


def check_eval_inputs(data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig) -> int:
    """What the evaluation after training reads, checked before anything loads (a mistake here would otherwise
    surface only after Algorithm 1 and training): the questions are readable (they are read: a PopQA-sized file
    takes a moment) and the index folder is an index. Returns the number of questions."""
    examples = eval_questions(data_cfg, eval_cfg)
    if not examples:
        raise DataError("no questions to evaluate on", source=eval_cfg.eval_dataset)
    if eval_cfg.eval_index != "world" and eval_cfg.eval_context_source != "file":
        check_index_folder(eval_cfg.eval_index, flag="--eval_index")
    return len(examples)


def eval_questions(data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig) -> list[QAExample]:
    qs = QuestionSet.of(eval_cfg, prefix="eval_")
    if qs.name == "world-adapt-heldout" and data_cfg.dataset != "world-adapt-train":
        raise ConfigError("eval_dataset world-adapt-heldout needs dataset world-adapt-train (else the held-out part "
                          "is undefined): set --eval_dataset to a QA file")
    return load_questions(qs, fmt=eval_cfg.eval_dataset_format, world=data_cfg.world())


def eval_retriever(data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig):
    if eval_cfg.eval_context_source == "file":  # each question's own passage: no index
        return None
    if eval_cfg.eval_index == "world":
        return BM25Retriever.build(build_world(WorldConfig(seed=data_cfg.world_seed)).passages, show_progress=False)
    return load_retriever(eval_cfg.eval_index)


def gate_config(data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig) -> GateConfig:
    """How NR / AR / ADAPT-LLM are decided and judged from the generated answers (Algorithm 1's judge)."""
    return GateConfig(policy="sweep", gate_rule=eval_cfg.gate_rule, ret_threshold=eval_cfg.ret_threshold,
                      top_k=eval_cfg.top_k, prompt_variant=data_cfg.prompt_variant,
                      max_passage_words=data_cfg.max_passage_words, judge=data_cfg.judge,
                      judge_normalize=data_cfg.judge_normalize, context_source=eval_cfg.eval_context_source)


def eval_configs(data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig, model_dir: str, out_dir: str | Path,
                 n_questions: int) -> tuple[EvalConfig, MethodConfig, PromptConfig, EngineConfig, GateMethodConfig]:
    """The evaluate command's configs for this evaluation (written to its ``config.yaml``). One chunk of all the
    questions: the gate batches them as one set, as this evaluation always has."""
    cfg = EvalConfig(model=model_dir, dataset=eval_cfg.eval_dataset, dataset_format=eval_cfg.eval_dataset_format,
                     split=eval_cfg.eval_split, start=eval_cfg.eval_start, limit=eval_cfg.eval_limit,
                     shuffle_seed=eval_cfg.eval_shuffle_seed,
                     index=None if eval_cfg.eval_index == "world" else eval_cfg.eval_index, output_dir=str(out_dir),
                     chunk_size=max(1, n_questions), world_seed=data_cfg.world_seed, show_progress=False)
    method = MethodConfig(method="adapt-llm", top_k=eval_cfg.top_k)
    gate = GateMethodConfig(gate_rule=eval_cfg.gate_rule, ret_threshold=eval_cfg.ret_threshold,
                            gate_prompt_variant=data_cfg.prompt_variant,
                            gate_max_passage_words=data_cfg.max_passage_words,
                            gate_max_new_tokens=eval_cfg.eval_max_new_tokens, gate_all_answers=True,
                            gate_context_source=eval_cfg.eval_context_source)
    return cfg, method, PromptConfig(), EngineConfig(batch_size=eval_cfg.eval_batch_size), gate


def policy_labels(mode: str, gate_rule: str) -> tuple[str, str, str]:
    """The table's row names for the three policies applied to a model trained with ``mode``: the paper's NR / AR /
    ADAPT-LLM only for the ADAPT-LLM model; a baseline model (``--mode nr|ar``, the paper's separately trained NR-LLM
    and AR-LLM) has its rows named after it, so they are not mistaken for the paper's rows."""
    if mode == "adapt":
        return "NR (never retrieve)", "AR (always retrieve)", f"ADAPT-LLM ({gate_rule})"
    model = {"nr": "NR-LLM", "ar": "AR-LLM"}[mode]
    return (f"{model} model, never retrieve (closed-book prompt)", f"{model} model, always retrieve (context prompt)",
            f"{model} model, <RET> gate ({gate_rule})")


def load_for_eval(model_dir: str, dtype: str = "auto"):
    """The trained adapter as the gate will be used: base + adapter, merged in memory for faster generation."""
    model, tokenizer = models.load_causal_lm(model_dir, models.ModelOptions(dtype=dtype))
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    return model.eval(), tokenizer


def evaluate_gate(model: Any, tokenizer: Any, data_cfg: AdaptDataConfig, eval_cfg: AdaptEvalConfig,
                  out_dir: str | Path, model_dir: str | None = None) -> dict[str, Any]:
    """Evaluate the loaded model into ``out_dir`` through the evaluate command's path (every answer of every
    question), decide NR / AR / ADAPT-LLM from its predictions and write their summaries; returns
    ``{"table", "sweep_table", "summaries", "by_kind", "sweep", "metrics"}``. ``model_dir``: the model's folder,
    as ``config.yaml`` records it."""
    examples = eval_questions(data_cfg, eval_cfg)
    out = Path(out_dir)
    configs = eval_configs(data_cfg, eval_cfg, model_dir or str(getattr(model, "name_or_path", "?")), out,
                           len(examples))
    for old in [*out.glob("predictions*.jsonl"), out / "metrics.json", out / "records.jsonl"]:
        old.unlink(missing_ok=True)  # another adapter's answers (records.jsonl: this job's file before)
    _, method, _, engine, gate = configs

    def make_run():
        # three prompt sets (parametric, NR, context), a bar each: a PopQA-sized evaluation runs for many minutes
        return gate_runner(model, tokenizer, eval_retriever(data_cfg, eval_cfg), method, gate, engine.batch_size,
                           show_progress=True)

    metrics = evaluate_examples(examples, *configs, make_run=make_run)
    done = read_done(out)
    records = [gate_record(done[ex.id]) for ex in examples]
    cfg = gate_config(data_cfg, eval_cfg)
    labels = policy_labels(data_cfg.mode, cfg.gate_rule)
    decided = dict(zip(labels, (redecide(records, policy, cfg)
                                for policy in ("never_retrieve", "always_retrieve", "adapt_llm"))))
    by_kind: dict[str, dict[str, Any]] = {}
    kinds = {ex.id: str(ex.metadata.get("kind", "all")) for ex in examples}
    for kind in sorted(set(kinds.values())):  # world: fictional vs common, where the gate should differ
        for name, recs in decided.items():
            short = name.split(" (")[0]
            by_kind[f"{short} [{kind}]"] = summarize([r for r in recs if kinds[r.question_id] == kind])
    summaries = {name: summarize(recs) for name, recs in decided.items()}
    sweep = sweep_threshold(records, eval_cfg.sweep_thresholds, cfg)
    table = format_table({**summaries, **by_kind})
    sweep_table = format_table({f"p(<RET>) > {row['threshold']:.2f}": row for row in sweep})
    result = {"table": table, "sweep_table": sweep_table, "summaries": summaries, "by_kind": by_kind, "sweep": sweep}
    (out / "summary.json").write_text(json.dumps({k: v for k, v in result.items() if "table" not in k},
                                                 indent=2) + "\n")
    (out / "table.txt").write_text(table + "\n\n" + sweep_table + "\n")
    return {**result, "metrics": metrics}
