"""Evaluate any method on any dataset with any checkpoint.

    python -m inference.evaluate --method dragin --dataset world-two-hop --limit 50 --output_dir runs/eval/dragin
    python -m inference.evaluate config.yaml --theta 1.2            # YAML, then command-line overrides
    python -m inference.evaluate --method adapt-llm --model runs/adapt_llm_demo/model --dataset world-single-hop
    accelerate launch -m inference.evaluate config.yaml             # data-parallel: one shard per process

Writes ``predictions.jsonl`` (one provenance record per question), ``metrics.json`` and ``config.yaml`` into
``output_dir``. A rerun with the same folder resumes: questions already in predictions are never run again.
Methods: the dynamic-RAG methods (:mod:`inference.methods`), ``iter-retgen``, and ADAPT-LLM's gate with its
baselines ``adapt-llm`` / ``nr`` / ``ar`` / ``popularity`` (:mod:`inference.gate_eval`, knobs ``--gate_rule``,
``--ret_threshold``, ``--popularity_threshold``, ``--gate_k``, ``--gate_inner`` ...).
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from inference.config import ConfigError, config_dict, parse_config, run_cli, save_config
from inference.engine import EngineConfig
from inference.gate_eval import GATE_METHODS, GateMethodConfig, check_examples, gate_runner, inner_method
from inference.methods import MethodConfig
from inference.prompts import PromptConfig
from inference.scoring import summarise

logger = logging.getLogger(__name__)


@dataclass
class EvalConfig:
    model: str = field(default="smollm2-135m", metadata={"help": "embedded name, hub id, model or adapter folder"})
    dataset: str = field(default="world-two-hop", metadata={"help": "world-single-hop|world-two-hop|world-common or"
                                                                     " a QA file"})
    dataset_format: str | None = None
    start: int = 0
    limit: int | None = None
    index: str | None = field(default=None, metadata={"help": "index folder (None: BM25 over the embedded world)"})
    query_encoder: str | None = None
    output_dir: str = "runs/eval/latest"
    dtype: str = "auto"
    device: str = "auto"
    chunk_size: int = 64  # questions per chunk; results are flushed to disk after each chunk
    world_seed: int = 0
    show_progress: bool = True

    def __post_init__(self):
        if self.chunk_size <= 0 or (self.limit is not None and self.limit <= 0):
            raise ValueError("chunk_size and limit must be positive")


def read_done(out: Path) -> dict[str, dict[str, Any]]:
    """Records already written by any process (resume), keyed by question id; a torn last line is dropped."""
    done: dict[str, dict[str, Any]] = {}
    for path in sorted(out.glob("predictions*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line an interrupted write left half-written; that question runs again
            done[rec["id"]] = rec
    return done


# Settings that only choose which questions run, or how: a resumed folder may differ in these.
RESUMABLE_CHANGES = frozenset({"start", "limit", "output_dir", "chunk_size", "show_progress", "device"})


def check_same_settings(saved: Path, current: dict[str, Any]) -> None:
    """Refuse to resume into a folder whose predictions came from other settings (one metrics file, one config)."""
    if not saved.is_file():
        return
    old = yaml.safe_load(saved.read_text()) or {}
    changed = sorted(k for k in current if k not in RESUMABLE_CHANGES and k in old and old[k] != current[k])
    if changed:
        diff = ", ".join(f"{k}: {old[k]!r} -> {current[k]!r}" for k in changed[:5])
        raise ConfigError(f"{saved.parent} holds predictions made with other settings ({diff}); "
                          "use a new --output_dir, or delete the folder to start again")


def drop_torn_tail(path: Path) -> None:
    """Cut a half-written last line (an interrupted run) so that appended records start on a line of their own."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def make_runner(cfg: EvalConfig, method: MethodConfig, prompt: PromptConfig, engine: EngineConfig,
                gate: GateMethodConfig | None = None):
    """A callable ``examples -> records`` for the configured method."""
    from accelerate import PartialState

    from inference.eval_data import load_eval_retriever
    from inference.models import ModelOptions, load_causal_lm

    # Under `accelerate launch` each process takes its own GPU (cuda:0, cuda:1, ...), not all cuda:0.
    device = str(PartialState().device) if cfg.device == "auto" else cfg.device
    model, tokenizer = load_causal_lm(cfg.model, ModelOptions(dtype=cfg.dtype, device=device))
    retriever = None if method.trigger == "never" else load_eval_retriever(
        cfg.index, cfg.dataset, query_encoder=cfg.query_encoder, world_seed=cfg.world_seed)
    if method.method not in GATE_METHODS:
        return method_runner(model, tokenizer, retriever, method, prompt, engine)
    if hasattr(model, "merge_and_unload"):  # a LoRA adapter: merged in memory, faster and a plain model
        model = model.merge_and_unload()
    gate = gate or GateMethodConfig()
    inner_cfg = inner_method(method, gate)
    inner = None if inner_cfg is None else method_runner(model, tokenizer, retriever, inner_cfg, prompt, engine)
    return gate_runner(model, tokenizer, retriever, method, gate, engine.batch_size, inner)


def method_runner(model, tokenizer, retriever, method: MethodConfig, prompt: PromptConfig, engine: EngineConfig):
    """The engine (dynamic-RAG methods) or the Iter-RetGen loop behind one ``examples -> records`` callable."""
    from inference.engine import DynamicRAGEngine
    from inference.prompts import PromptBuilder

    if method.method == "iter-retgen":
        return iter_retgen_runner(model, tokenizer, retriever, method, prompt, engine)
    eng = DynamicRAGEngine(model, tokenizer, retriever, PromptBuilder(tokenizer, prompt), method, engine)
    return lambda examples: eng.run(examples, show_progress=False)


def iter_retgen_runner(model, tokenizer, retriever, method: MethodConfig, prompt: PromptConfig,
                       engine: EngineConfig):
    """Iter-RetGen behind the same record shape as the engine's methods (one retrieval per iteration)."""
    import time

    from inference.iter_retgen import IterRetGen, IterRetGenConfig, LMGenerator

    generator = LMGenerator(model, tokenizer, max_new_tokens=engine.max_new_tokens, batch_size=engine.batch_size)
    loop = IterRetGen(retriever, generator, IterRetGenConfig(iterations=method.iterations, k=method.top_k,
                                                             prompt_style=prompt.prompt_style))

    def run(examples):
        start, before, passes = time.perf_counter(), generator.generated_tokens, generator.forward_passes
        records = loop.run(examples)
        seconds = (time.perf_counter() - start) / max(1, len(examples))
        tokens = (generator.generated_tokens - before) / max(1, len(examples))
        passes = (generator.forward_passes - passes) / max(1, len(examples))
        return [{"id": r.id, "question": r.question, "answers": r.answers, "output": r.iterations[-1].output,
                 "retrievals": [{"round": t + 1, "query": it.query, "doc_ids": it.doc_ids} for t, it in
                                enumerate(r.iterations)],
                 "iterations": [{"answer": it.answer, **it.metrics} for it in r.iterations],
                 "llm_forward_passes": passes, "generated_tokens": tokens, "rounds": len(r.iterations),
                 "seconds": seconds} for r in records]
    return run


def evaluate(cfg: EvalConfig, method: MethodConfig, prompt: PromptConfig, engine: EngineConfig,
             gate: GateMethodConfig | None = None) -> dict[str, Any]:
    from accelerate import PartialState
    from tqdm.auto import tqdm

    from inference.eval_data import load_examples
    from inference.metrics import extract_answer

    state = PartialState()
    gate = gate or GateMethodConfig()
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    examples = load_examples(cfg.dataset, fmt=cfg.dataset_format, start=cfg.start, limit=cfg.limit,
                             world_seed=cfg.world_seed)
    ids = [e.id for e in examples]
    if len(set(ids)) != len(ids):
        raise ValueError(f"dataset {cfg.dataset} has duplicate question ids; resume needs unique ids")
    check_examples(method, examples, cfg.dataset)
    done = read_done(out)
    if done:
        check_same_settings(out / "config.yaml", config_dict(cfg, method, prompt, engine, gate))
    todo = [e for e in examples if e.id not in done][state.process_index::state.num_processes]
    if state.is_main_process:
        save_config(out / "config.yaml", cfg, method, prompt, engine, gate)
        print(f"{len(examples)} questions, {len(done)} already done, {len(todo)} to run here")
    shard = out / (f"predictions.rank{state.process_index}.jsonl" if state.num_processes > 1 else "predictions.jsonl")
    drop_torn_tail(shard)
    if todo:
        run = make_runner(cfg, method, prompt, engine, gate)
        bar = tqdm(total=len(todo), desc=method.method, disable=not (cfg.show_progress and state.is_main_process))
        for s in range(0, len(todo), cfg.chunk_size):
            chunk = todo[s:s + cfg.chunk_size]
            records = run(chunk)
            with shard.open("a", encoding="utf-8") as f:
                for rec in records:
                    rec["answer"] = extract_answer(rec["output"] or "")
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            bar.update(len(chunk))
        bar.close()
    state.wait_for_everyone()
    if not state.is_main_process:
        return {}
    records = [r for i, r in read_done(out).items() if i in set(ids)]
    metrics = summarise(records, dataset=cfg.dataset)
    metrics.update({"method": method.method, "model": cfg.model, "dataset": cfg.dataset})
    if method.method in GATE_METHODS:
        metrics["gate_inner"] = gate.gate_inner
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(json.dumps(metrics, indent=2))
    return metrics


def main(argv: list[str] | None = None) -> None:
    configs = parse_config((EvalConfig, MethodConfig, PromptConfig, EngineConfig, GateMethodConfig), argv,
                           prog="python -m inference.evaluate")
    evaluate(*configs)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(run_cli(main))
