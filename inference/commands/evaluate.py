"""Evaluate any method on any dataset with any checkpoint.

    python -m inference.commands.evaluate --method dragin --dataset world-two-hop --limit 50 --output_dir \\
        runs/eval/dragin
    python -m inference.commands.evaluate inference/configs/eval_example.yaml --theta 1.2   # YAML, then overrides
    python -m inference.commands.evaluate --method adapt-llm --model runs/adapt_llm_demo/model --dataset \\
        world-single-hop
    accelerate launch -m inference.commands.evaluate inference/configs/eval_example.yaml   # one shard per process

Writes ``predictions.jsonl`` (one provenance record per question), ``metrics.json`` and ``config.yaml`` into
``output_dir`` (default ``runs/eval/<method>-<dataset name>``). A rerun with the same folder resumes: questions
already in predictions are never run again. Everything the user names (questions, index, model, device, output
folder) is checked before any model loads or anything is written; the run holds a lock on ``output_dir``, so a
second run into the same folder stops at once.
Methods: the dynamic-RAG methods (:mod:`inference.dynamic_rag.methods`), ``iter-retgen``, and ADAPT-LLM's gate with its
baselines ``adapt-llm`` / ``nr`` / ``ar`` / ``popularity`` (:mod:`inference.adapt_gate.gate_eval`, knobs
``--gate_rule``,
``--ret_threshold``, ``--popularity_threshold``, ``--gate_inner`` ...). ``--top_k`` is every method's retrieval
depth (passages per retrieval; unset: the method's own).
The held-out evaluation of the ADAPT-LLM training job runs through :func:`evaluate_examples` too, so its folder
holds the same files.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, get_args

import yaml

from adaptive_rag.lm import models
from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import config_dict, parse_config
from adaptive_rag.plumbing.dragin_eval import dataset_kind
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.metrics import NORMALISATIONS, Normalisation
from adaptive_rag.plumbing.progress import bar_options
from adaptive_rag.plumbing.question_set import WORLD_SETS, QuestionSet
from adaptive_rag.plumbing.record_log import RecordLog, check_same_settings
from adaptive_rag.plumbing.records import PredictionRecord, QAExample
from adaptive_rag.plumbing.scoring import summarise
from adaptive_rag.plumbing.wandb_logging import check_report_to, log_run
from data_builders.question_loader import WorldOptions, load_questions
from inference.adapt_gate.gate_eval import (
    GATE_METHODS,
    GateMethodConfig,
    check_examples,
    gate_runner,
    inner_method,
    resolved_method,
)
from inference.commands import eval_data
from inference.commands.eval_checks import check_device, check_index_folder, check_model_name, check_output_dir
from inference.commands.eval_folder import SingleProcess, locked_output, merge_shards, read_done, read_done_everywhere
from inference.dynamic_rag.batch_plan import BatchPlan, plan_generator_batch
from inference.dynamic_rag.dragin_settings import DEFAULT_MAX_NEW_TOKENS, resolve_run
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import PRESETS, MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig
from inference.dynamic_rag.text_units import text_rules
from inference.iter_retgen.loop import IterRetGen, IterRetGenConfig, LMGenerator
from inference.iter_retgen.prompts import build_prompt
from inference.search_agent.method import search_agent_runner
from retrieval_adapt.corpus_store import load_meta

DEFAULT_OUTPUT_ROOT = "runs/eval"


@dataclass
class EvalConfig:
    model: str = field(default="smollm2-135m", metadata={"help": "embedded name, hub id, model or adapter folder"})
    dataset: str = field(default="world-two-hop", metadata={"help": f"{'|'.join(WORLD_SETS)} or a QA file"})
    dataset_format: str | None = None  # force the QA file's format (None: detected from the file; hf: a hub dataset)
    split: str | None = None  # a hub dataset's split (default validation)
    start: int = 0  # first question (after the shuffle)
    limit: int | None = None  # how many questions from start (None: all)
    shuffle_seed: int | None = None  # shuffle the questions with this seed before slicing (None: file order)
    index: str | None = field(default=None, metadata={"help": "index folder (None: BM25 over the embedded world)"})
    query_encoder: str | None = None  # an adapted query encoder folder for a dense index (retrieval_adapt)
    output_dir: str | None = field(default=None, metadata={
        "help": f"where predictions.jsonl, metrics.json and config.yaml go; rerunning into it resumes (default: "
                f"{DEFAULT_OUTPUT_ROOT}/<method>-<dataset name>, e.g. {DEFAULT_OUTPUT_ROOT}/dragin-world-two-hop)"})
    dtype: str = "auto"  # auto (bf16 on CUDA; CPU: bf16 where a probe finds it faster), float32, bfloat16, float16
    device: str = "auto"  # auto (CUDA when there is one; one GPU per process under accelerate), cpu, cuda:N, mps
    chunk_size: int = 64  # questions per chunk; results are flushed to disk after each chunk
    world_seed: int = 0  # seed of the embedded world (its questions and passages)
    show_progress: bool = True  # a progress bar on stderr
    answer_normalisation: Normalisation = field(default="official", metadata={
        "help": "EM/F1 normalisation: official (SQuAD v1.1 / HotpotQA scripts) or robust (also Unicode punctuation)"})
    report_to: str = field(default="none", metadata={
        "help": "wandb: log config, metrics and a predictions table (offline without an API key); none: off"})
    run_name: str | None = field(default=None, metadata={"help": "wandb run name (default: the output folder)"})

    def __post_init__(self):
        if self.chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        QuestionSet.of(self)  # an old dataset name, a bad start or limit: one line naming the fix
        if self.dtype not in get_args(models.DType):
            raise ValueError(f"dtype must be one of {', '.join(get_args(models.DType))}, got {self.dtype!r}")
        check_report_to(self.report_to)
        if self.answer_normalisation not in NORMALISATIONS:
            raise ValueError(f"answer_normalisation must be one of {', '.join(NORMALISATIONS)}, "
                             f"got {self.answer_normalisation!r}")


# Settings that only choose which questions run, or how: a resumed folder may differ in these.
# answer_normalisation only changes scoring, which is recomputed from all predictions at the end.
# batch_size only changes how many questions decode together (the answers are the same), so another machine's
# plan may resume a folder.
RESUMABLE_CHANGES = frozenset({"start", "limit", "shuffle_seed", "output_dir", "chunk_size", "show_progress", "device",
                               "answer_normalisation", "report_to", "run_name", "batch_size", "memory_budget_gb"})


def default_output_dir(method: str, dataset: str) -> str:
    """``runs/eval/<method>-<dataset name>``: a dataset file by its name without suffix (``PATH/hotpotqa.jsonl``
    -> ``hotpotqa``), an embedded dataset by its own name; so commands that differ in method or dataset never share
    a folder (the second would refuse the first's predictions)."""
    name = Path(dataset.rstrip("/")).name
    for suffix in (".gz", ".bz2", ".xz"):
        name = name.removesuffix(suffix)
    if Path(name).suffix in (".json", ".jsonl", ".tsv", ".csv", ".parquet", ".txt"):
        name = Path(name).stem
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "dataset"
    return f"{DEFAULT_OUTPUT_ROOT}/{method}-{safe}"


def resolve_output_dir(cfg: EvalConfig, method: MethodConfig) -> EvalConfig:
    """``cfg`` with ``output_dir`` filled in where it was left out (:func:`default_output_dir`)."""
    if cfg.output_dir:
        return cfg
    return replace(cfg, output_dir=default_output_dir(method.method, cfg.dataset))


def make_runner(cfg: EvalConfig, method: MethodConfig, prompt: PromptConfig, engine: EngineConfig,
                gate: GateMethodConfig | None = None):
    """A callable ``examples -> records`` for the configured method."""
    from accelerate import PartialState

    # Under `accelerate launch` each process takes its own GPU (cuda:0, cuda:1, ...), not all cuda:0.
    device = str(PartialState().device) if cfg.device == "auto" else cfg.device
    model, tokenizer = models.load_causal_lm(cfg.model, models.ModelOptions(dtype=cfg.dtype, device=device))
    retriever = None if not needs_retrieval(method, gate) else eval_data.load_eval_retriever(
        cfg.index, cfg.dataset, query_encoder=cfg.query_encoder, world_seed=cfg.world_seed)
    if method.dragin_profile == "reference" and retriever is not None \
            and getattr(retriever, "scoring", None) not in ("elasticsearch", None):
        print("note: --dragin_profile reference retrieves here with bm25s's own scoring; the authors' Elasticsearch "
              "index scores as an index built with --bm25_scoring elasticsearch does (docs/bm25_elasticsearch.md)",
              file=sys.stderr)
    if method.method not in GATE_METHODS:
        return with_dtype(method_runner(model, tokenizer, retriever, method, prompt, engine), model)
    if hasattr(model, "merge_and_unload"):  # a LoRA adapter: merged in memory, faster and a plain model
        model = model.merge_and_unload()
    gate = gate or GateMethodConfig()
    inner_cfg = inner_method(method, gate)
    inner = None if inner_cfg is None else method_runner(model, tokenizer, retriever, inner_cfg, prompt, engine)
    batch = plan_generator_batch(engine.batch_size, model, prompt_tokens=GATE_PROMPT_TOKENS,
                                 top_k=method.resolved().top_k, new_tokens=gate.gate_max_new_tokens,
                                 budget_gb=engine.memory_budget_gb)
    run = gate_runner(model, tokenizer, retriever, method, gate, batch.size, inner)
    run.batch_plan = batch
    run.inner_batch_plan = getattr(inner, "batch_plan", None)
    return with_dtype(run, model)


GATE_PROMPT_TOKENS = 64  # the gate prompt's words around the question and its passage (data_builders/adapt_llm.py)
CHAT_TEMPLATE_TOKENS = 32  # a chat template's system turn and role markers


def with_dtype(run, model):
    """``run`` that says which dtype its model computes in (``dtype: auto`` resolves per machine), for config.yaml,
    and carries the batch plans of what it runs, for metrics.json."""
    def runner(examples):
        return run(examples)

    dtype = getattr(model, "dtype", None)  # a transformers model's; absent on a test double
    runner.resolved_dtype = None if dtype is None else str(dtype).removeprefix("torch.")
    runner.batch_plan = getattr(run, "batch_plan", None)
    runner.inner_batch_plan = getattr(run, "inner_batch_plan", None)
    return runner


def batching_record(run) -> dict[str, Any] | None:
    """How many questions ran together (metrics.json's ``batching``): the plan, its halvings after out-of-memory
    errors, and the gate's inner method's; None where the runner has no plan (a test double, nothing run)."""
    plan: BatchPlan | None = getattr(run, "batch_plan", None)
    if plan is None:
        return None
    out = plan.record()
    inner: BatchPlan | None = getattr(run, "inner_batch_plan", None)
    if inner is not None:
        out["inner"] = inner.record()
    return out


def method_runner(model, tokenizer, retriever, method: MethodConfig, prompt: PromptConfig, engine: EngineConfig):
    """The engine (dynamic-RAG methods) or the Iter-RetGen loop behind one ``examples -> records`` callable."""
    if method.method == "iter-retgen":
        return iter_retgen_runner(model, tokenizer, retriever, method, prompt, engine)
    if PRESETS[method.method].runner == "search-agent":
        return search_agent_runner(model, tokenizer, retriever, method, prompt, engine)
    eng = DynamicRAGEngine(model, tokenizer, retriever, PromptBuilder(tokenizer, prompt), method, engine)

    def run(examples):
        return eng.run(examples, show_progress=False)

    run.batch_plan = eng.batch  # halved in place after an out-of-memory error
    return run


def iter_retgen_runner(model, tokenizer, retriever, method: MethodConfig, prompt: PromptConfig,
                       engine: EngineConfig):
    """Iter-RetGen behind the same record type as the engine's methods (one retrieval per iteration)."""
    new_tokens = engine.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    def template() -> int:  # the prompt's own words (the demos too, under the paper style) and a chat template's
        return len(tokenizer(build_prompt(prompt.prompt_style, "", []).user).input_ids) + CHAT_TEMPLATE_TOKENS

    batch = plan_generator_batch(engine.batch_size, model, prompt_tokens=template, top_k=method.resolved().top_k,
                                 new_tokens=new_tokens, budget_gb=engine.memory_budget_gb)
    generator = LMGenerator(model, tokenizer, max_new_tokens=new_tokens, batch_size=batch.size)
    loop = IterRetGen(retriever, generator, IterRetGenConfig(iterations=method.iterations,
                                                             top_k=method.resolved().top_k,
                                                             prompt_style=prompt.prompt_style))

    def run(examples: list[QAExample]) -> list[PredictionRecord]:
        start = time.perf_counter()
        records = loop.run(examples)
        seconds = (time.perf_counter() - start) / max(1, len(examples))  # the chunk's wall time shared evenly
        return [r.to_prediction(seconds) for r in records]

    run.batch_plan = batch
    return run


def needs_retrieval(method: MethodConfig, gate: GateMethodConfig | None = None) -> bool:
    """The method retrieves, or it is a gate method asked for every path's answer (NR's too); a gate answering
    from each question's own passage (gate_context_source file) with its single prompt needs no index."""
    all_answers = gate is not None and gate.gate_all_answers and method.method in GATE_METHODS
    if gate is not None and method.method in GATE_METHODS and getattr(gate, "gate_context_source", "retrieve") \
            == "file" and gate.gate_inner == "single":
        return False
    return method.trigger != "never" or all_answers


def check_inputs(cfg: EvalConfig, method: MethodConfig, gate: GateMethodConfig | None = None) -> list[QAExample]:
    """The questions to run, after checking everything the user named; nothing loads and nothing is written."""
    check_output_dir(cfg.output_dir)
    examples = load_questions(QuestionSet.of(cfg), fmt=cfg.dataset_format, world=WorldOptions(seed=cfg.world_seed))
    check_examples(method, examples, cfg.dataset)
    eval_data.check_index_given(cfg.index, cfg.dataset, needs_retrieval(method, gate))
    check_resources(cfg, method, gate)
    return examples


def check_resources(cfg: EvalConfig, method: MethodConfig, gate: GateMethodConfig | None = None) -> None:
    """The model, the index folder and the device exist (small files only: nothing is loaded twice)."""
    if needs_retrieval(method, gate) and cfg.index:
        check_index_folder(cfg.index, cfg.query_encoder)
    check_model_name(cfg.model)
    check_device(cfg.device)


def evaluate(cfg: EvalConfig, method: MethodConfig, prompt: PromptConfig, engine: EngineConfig,
             gate: GateMethodConfig | None = None) -> dict[str, Any]:
    import torch
    from accelerate import PartialState

    # cpu=True where there is no CUDA: processes started by torchrun then form one CPU (gloo) group instead of
    # each believing it runs alone (and all writing one predictions file)
    state = PartialState(cpu=not torch.cuda.is_available())
    gate = gate or GateMethodConfig()
    # the method's own depth and dataset-dependent profile values, recorded in config.yaml
    method = resolved_method(method, gate, cfg.dataset, prompt.demos, model=cfg.model)
    prompt, engine = resolve_run(method, prompt, engine, cfg.dataset, prompt.demos)
    cfg = resolve_output_dir(cfg, method)
    examples = check_inputs(cfg, method, gate)
    return evaluate_examples(examples, cfg, method, prompt, engine, gate,
                             make_run=lambda: make_runner(cfg, method, prompt, engine, gate), state=state)


def evaluate_examples(examples: list[QAExample], cfg: EvalConfig, method: MethodConfig, prompt: PromptConfig,
                      engine: EngineConfig, gate: GateMethodConfig, *,
                      make_run: Callable[[], Callable[[list[QAExample]], list[PredictionRecord]]],
                      state=None) -> dict[str, Any]:
    """Evaluate ``examples`` into ``cfg.output_dir`` (the command, and the ADAPT-LLM training job with its own
    questions and loaded model): resume from the predictions already there (refusing other settings), write
    ``config.yaml``, run the questions left chunk by chunk with ``make_run()`` (called only when some are left) into
    ``predictions.jsonl``, and score them all into ``metrics.json``, which is returned ({} off the main process).
    ``state``: accelerate's process state; None: this process alone."""
    state = state or SingleProcess()
    out = Path(cfg.output_dir)
    with locked_output(out, state):
        done = read_done_everywhere(out, state)
        if done:
            check_same_settings(out / "config.yaml", config_dict(cfg, method, prompt, engine, gate),
                                RESUMABLE_CHANGES, what="predictions")
        todo = [e for e in examples if e.id not in done][state.process_index::state.num_processes]
        # the model loads before config.yaml is written: a model that fails to load leaves no folder behind
        run = make_run() if todo else None
        if state.is_main_process:
            resolved = getattr(run, "resolved_dtype", None)  # what dtype auto chose here; not a resume check
            write_text_atomic(out / "config.yaml", yaml.safe_dump({**config_dict(cfg, method, prompt, engine, gate),
                                                              **({"resolved_dtype": resolved} if resolved else {})},
                                                             sort_keys=False))
            plan = getattr(run, "batch_plan", None)
            batching = f"; {plan.describe()}" if plan is not None else ""
            print(f"{len(examples)} questions, {len(done)} already done, {len(todo)} to run here{batching}; "
                  f"output: {out}")
        shard = out / (f"predictions.rank{state.process_index}.jsonl" if state.num_processes > 1
                       else "predictions.jsonl")
        if run is not None:
            saved = len(done) if state.num_processes == 1 else None  # others' counts are not known here
            run_chunks(run, todo, RecordLog(shard, key="id"), cfg, method, state, saved, len(examples))
        state.wait_for_everyone()
        if not state.is_main_process:
            return {}
        # every process has finished: one predictions.jsonl, as a single process writes it (also after a resumed
        # data-parallel run that was interrupted, whose shards a later single process finds)
        merge_shards(out, [e.id for e in examples])
        return write_metrics(out, examples, cfg, method, gate, batching=batching_record(run))


def run_chunks(run, todo: list[QAExample], log: RecordLog, cfg: EvalConfig, method: MethodConfig, state,
               saved: int | None, total: int) -> None:
    """Run the questions chunk by chunk; each chunk's records are durable before the next chunk starts. Ctrl-C
    ends in a message saying how many questions are saved where (``saved``: how many were before this run)."""
    from tqdm.auto import tqdm

    written = 0
    bar = tqdm(total=len(todo), desc=method.method,
               **bar_options(disable=not (cfg.show_progress and state.is_main_process)))
    try:
        for s in range(0, len(todo), cfg.chunk_size):
            chunk = todo[s:s + cfg.chunk_size]
            records = run(chunk)
            log.append(rec.to_dict() for rec in records)
            written += len(records)
            bar.update(len(chunk))
    except KeyboardInterrupt:
        count = f"{saved + written} of {total}" if saved is not None else f"{written} more of the {total}"
        raise KeyboardInterrupt(f"{count} questions are saved in {log.path}; rerun the same command to resume "
                                "(saved questions are not run again)") from None
    finally:
        bar.close()


def write_metrics(out: Path, examples: list[QAExample], cfg: EvalConfig, method: MethodConfig,
                  gate: GateMethodConfig, batching: dict[str, Any] | None = None) -> dict[str, Any]:
    wanted = {e.id for e in examples}
    records = [r for i, r in read_done(out).items() if i in wanted]
    metrics = summarise(records, normalisation=cfg.answer_normalisation, **scoring_mode(method, cfg.dataset))
    metrics.update({"method": method.method, "model": cfg.model, "dataset": cfg.dataset})
    if method.method in GATE_METHODS:
        metrics["gate_inner"] = gate.gate_inner
    if PRESETS[method.method].runner == "engine":  # which sentence splitter and content-word test ran
        metrics["text_rules"] = text_rules(method.text_rules).name
    if needs_retrieval(method, gate):  # which index answered: its kind and, for BM25, its scoring
        try:
            meta = load_meta(cfg.index) if cfg.index else {"kind": "bm25", "scoring": "bm25s"}
        except (OSError, ValueError):  # read when the run started; gone since: the run's scores still stand
            meta = {}
        metrics["index_kind"] = meta.get("kind")
        if meta.get("kind") in ("bm25", "lucene"):
            metrics["bm25_scoring"] = meta.get("scoring", "bm25s")
    if batching is not None:  # this invocation's: a resumed run records its own machine's batch
        metrics["batching"] = batching
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2))
    print(json.dumps(metrics, indent=2))
    log_run(cfg.report_to, job="evaluate", name=cfg.run_name or out.name, folder=out,
            config=yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8")), metrics=metrics,
            records=[r.to_dict() for r in records])
    return metrics


# Every setting of one evaluation, in the order evaluate() takes them (the sweep builds the same).
CONFIG_TYPES = (EvalConfig, MethodConfig, PromptConfig, EngineConfig, GateMethodConfig)
def scoring_mode(method: MethodConfig, dataset: str) -> dict[str, Any]:
    """How answers are extracted: the engine methods' ``answer_extraction`` (DRAGIN's eval.py under the reference
    profile, with the rule of the dataset the name says), the project's for Iter-RetGen and the gate methods."""
    if PRESETS[method.method].runner != "engine" or method.answer_extraction != "dragin":
        return {"extraction": "project"}
    return {"extraction": "dragin", "dataset_kind": dataset_kind(dataset)}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].endswith((".yaml", ".yml")) and "sweep" in _yaml_keys(argv[0]):
        raise ConfigError(f"{argv[0]} is a sweep recipe (it has 'sweep:'): run it with "
                          f"python -m inference.commands.sweep {' '.join(argv)}")
    evaluate(*parse_config(CONFIG_TYPES, argv, prog="python -m inference.commands.evaluate"))


def _yaml_keys(path: str) -> set[str]:
    """The top-level keys of a YAML mapping; none when it is missing or unreadable (parse_config then says why)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()
    return set(data) if isinstance(data, dict) else set()


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run_cli(main, resume_hint="predictions.jsonl in the output folder keeps every finished chunk; rerun "
                                      "the same command to resume")


if __name__ == "__main__":
    sys.exit(cli())
