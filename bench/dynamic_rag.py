"""DRAGIN the way the authors' code computes it (baseline) against the batched engine, on the same questions and
model, with a profile and the compute bound of every runner.

    python bench/dynamic_rag.py --json runs/bench/dynamic_rag.json
    python bench/dynamic_rag.py --questions 64 --batch_size 64 --theta 0.5 --dataset world-two-hop
    python bench/dynamic_rag.py --prompt_style paper --demos hotpotqa --theta 0.8 --dragin_profile reference \\
        --max_new_tokens 100 --dataset data/hotpotqa/hotpot_dev_distractor_v1.json --index runs/hotpotqa/bm25
    python bench/dynamic_rag.py --questions 8 --repeats 1 --shared_head both     # with and without the shared head
    python bench/dynamic_rag.py --packed_linears both        # the engine on prepacked and on stock linear layers

Runners: (a) ``authors``, ``bench/dragin_authors_pattern.py``, the headline baseline: one question at a time,
``generate`` over the full prompt at every round, then one extra pass over the round's generated text for RIND and,
when retrieval fires, one over question + answer so far for QFS, as the authors' code does; (b) ``replay``,
``bench/dragin_replay.py`` (``--replay on``): the engine's decisions replayed one question at a time with full
passes over prompt + text (every pass re-encodes the demos: more work than the authors' code); its outputs must
equal the engine's in float32; (c) the engine: all questions batched, signals captured while decoding with the KV
cache, the prompts' shared head (the paper style's few-shot demos; the chat template's system turn) prefilled once
(``--shared_head``), and, in bf16 on a CPU, linear layers on weights prepacked once for oneDNN
(``--packed_linears``; the same bits as the stock layers the baselines run). The HotpotQA index:
``bench/experiments/README.md``.

Baselines and engine run ``--repeats`` times, interleaved (A B C A B C ...), so that a neighbour's load hits all
alike; the headline ``ratio`` is the median of the per-round ratios of wall time **authors ÷ engine**, with its
spread; ``ratio_replay`` is replay ÷ engine.
The profile gives each runner's seconds per run in: prefill and one-token decode steps (model calls), the
baselines' extra attention passes, the engine's KV-cache reshuffles (joining and leaving the batch), retrieval,
signals (Python per-token work: pieces, sentence ends, triggers, queries), prompts (building the next round's
prompt) and tokenisation (every tokenizer call, wherever it happens), plus the prompt tokens run through the model
per question. The compute bound (``bench/compute_bound.py``): per runner and phase the tokens the model ran, the
GFLOP they imply and the seconds the model's matrix products need at the rates a probe measured on this machine in
the same run; ``<runner>_over_bound`` is wall ÷ bound. Also the share of identical greedy outputs, and the engine's
overhead: generation with signals ÷ plain ``generate`` at the same batch size (both on the engine's linear layers,
so that it measures the signals).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compute_bound  # noqa: E402
import harness  # noqa: E402
from dragin_authors_pattern import AuthorsPatternDragin  # noqa: E402
from dragin_replay import DraginReplay  # noqa: E402

from adaptive_rag.lm.decoder import BatchDecoder, Sequence, shared_head_ids  # noqa: E402
from adaptive_rag.lm.models import ModelOptions, load_causal_lm  # noqa: E402
from adaptive_rag.lm.packed_linear import linear_packing  # noqa: E402
from adaptive_rag.lm.profiling import Profile  # noqa: E402
from adaptive_rag.lm.tokenization import batch_prompt_ids  # noqa: E402
from adaptive_rag.plumbing.question_set import QuestionSet  # noqa: E402
from adaptive_rag.plumbing.records import Passage  # noqa: E402
from data_builders.question_loader import load_questions  # noqa: E402
from inference.commands.eval_data import load_eval_retriever  # noqa: E402
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig  # noqa: E402
from inference.dynamic_rag.methods import MethodConfig  # noqa: E402
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig  # noqa: E402
from inference.dynamic_rag.text_units import split_sentences  # noqa: E402

SECTIONS = ("prefill", "decode", "attention_pass", "cache", "retrieval", "signals", "prompts", "tokenisation")
# The engine's own methods, timed from outside (the engine has no profile hook of its own).
ENGINE_METHODS = {"_retrieve": "retrieval", "_inspect": "signals", "_start_round": "prompts"}
TOKENIZER_METHODS = ("__call__", "encode", "decode", "batch_decode", "convert_ids_to_tokens")


def prompt_head_ids(tokenizer, prompts: PromptBuilder) -> list[int]:
    """The ids every prompt of this builder starts with: two probe prompts that differ right after the head."""
    probe = Passage("probe", "Probe", "A probe passage.")
    return shared_head_ids(tokenizer, [prompts.build("Who wrote the probe?", []).text,
                                       prompts.build("Where is it?", [probe], " It is").text])


@contextmanager
def profiled_tokenizer(tokenizer, profile: Profile):
    """Every call of the tokenizer's (class's) encoding and decoding methods timed as "tokenisation"."""
    cls = type(tokenizer)
    saved = {name: cls.__dict__.get(name) for name in TOKENIZER_METHODS}
    for name in TOKENIZER_METHODS:
        setattr(cls, name, profile.wrap("tokenisation", getattr(cls, name)))
    try:
        yield
    finally:
        for name, fn in saved.items():
            if fn is None:
                delattr(cls, name)
            else:
                setattr(cls, name, fn)


def run_baseline(ref: DraginReplay, examples, tokenizer) -> tuple[list[dict], float, Profile]:
    ref.profile = profile = Profile()
    cpu = time.process_time()
    with profiled_tokenizer(tokenizer, profile):
        records, seconds = ref.run(examples)
    profile.cpu_seconds = time.process_time() - cpu
    ref.profile = None
    return records, seconds, profile


def run_engine(make_engine, examples, tokenizer, head: list[int] | None,
               head_once: bool | None = None) -> tuple[list[dict], float, Profile, int]:
    """One engine run; the shared head's own prefill counts in its time. ``make_engine`` builds an engine whose
    config has ``shared_head=False``: the head is set here, so that it is prefilled once."""
    profile = Profile()
    cpu = time.process_time()
    with profiled_tokenizer(tokenizer, profile):
        start = time.perf_counter()
        engine = make_engine()
        engine.decoder.profile = profile
        if head_once is not None:  # None: the decoder's own choice
            engine.decoder.head_once = head_once
        engine.decoder.set_shared_prefix(head)  # None: off
        for name, section in ENGINE_METHODS.items():
            if hasattr(engine, name):
                setattr(engine, name, profile.wrap(section, getattr(engine, name)))
            else:  # renamed in the engine: its time lands in "other"
                print(f"warning: DynamicRAGEngine.{name} is gone, so '{section}' is not timed", file=sys.stderr)
        records = engine.run(examples, show_progress=False)
        seconds = time.perf_counter() - start
    profile.cpu_seconds = time.process_time() - cpu
    engine.model.set_attn_implementation("sdpa")  # the reference's generate runs on SDPA
    records = [r.to_dict() if hasattr(r, "to_dict") else r for r in records]
    return records, seconds, profile, engine.decoder.forward_passes


def overhead(model, tokenizer, prompts: list[str], batch_size: int, new_tokens: int,
             packed_linears: bool) -> tuple[float, float]:
    """Seconds for ``new_tokens`` greedy tokens per prompt: plain ``generate`` vs the signal decoder, same batch."""
    ids = batch_prompt_ids(tokenizer, prompts[:batch_size])  # the engine's own ids, BOS included where it belongs
    batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt")
    with torch.no_grad(), linear_packing(model, enabled=packed_linears):  # the decoder's linear layers: the ratio
        _, t_plain = harness.timed(lambda: model.generate(  # is the cost of the signals alone
            **batch, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
            pad_token_id=tokenizer.pad_token_id))
    dec = BatchDecoder(model, tokenizer, stop_token_ids=set(), packed_linears=packed_linears)
    dec.stop_token_ids = set()  # same token count as generate(min_new_tokens=...)
    seqs = [Sequence(i, list(p), new_tokens) for i, p in enumerate(ids)]
    start = time.perf_counter()
    dec.admit(seqs)
    while dec.active:
        dec.step()
    t_signals = time.perf_counter() - start
    model.set_attn_implementation("sdpa")
    return t_plain, t_signals


def profile_figures(name: str, profiles: list[Profile], seconds: list[float], questions: int) -> dict[str, float]:
    """Flat figures of one runner: seconds per run in each section (mean over runs; "other" is the rest of the
    run) and prompt tokens run through the model per question."""
    runs = len(profiles)
    out = {f"{name}_{s}_s": sum(p.seconds.get(s, 0.0) for p in profiles) / runs for s in SECTIONS}
    out[f"{name}_other_s"] = sum(seconds) / runs - sum(out.values())
    for counter in ("prefill_tokens", "prefill_padded_tokens", "attention_pass_tokens", "shared_head_tokens_reused"):
        total = sum(p.counts.get(counter, 0) for p in profiles)
        if total:
            out[f"{name}_{counter}_per_q"] = total / runs / questions
    return out


def print_profile(results: dict, runners: list[str]) -> None:
    rows = []
    for section in SECTIONS + ("other",):
        row: list = [section]
        for name in runners:
            s, total = results[f"{name}_{section}_s"], results[f"{name}_seconds_mean"]
            row += [s, f"{100 * s / total:.0f}%"]
        rows.append(row)
    for counter in ("prefill_tokens", "prefill_padded_tokens", "attention_pass_tokens", "shared_head_tokens_reused"):
        if any(f"{name}_{counter}_per_q" in results for name in runners):
            rows.append([f"{counter} / question"] + [x for name in runners
                                                     for x in (results.get(f"{name}_{counter}_per_q"), "")])
    header = ["seconds per run"] + [x for name in runners for x in (name, "share")]
    harness.print_table(header, rows, floats=".2f")


def bound_figures(name: str, profiles: list[Profile], matmul, wall: float) -> dict[str, float]:
    """Per phase: tokens, GFLOP and compute bound per run (mean over runs); the run's bound and wall ÷ bound."""
    per_run = [compute_bound.bound(p.calls, matmul) for p in profiles]
    out: dict[str, float] = {}
    for phase in compute_bound.PHASES:
        for field in ("calls", "tokens", "gflop", "kv_gb", "bound_s"):
            out[f"{name}_{phase}_{field}"] = sum(b[phase][field] for b in per_run) / len(per_run)
    total = sum(out[f"{name}_{phase}_bound_s"] for phase in compute_bound.PHASES)
    out[f"{name}_gflop"] = sum(out[f"{name}_{phase}_gflop"] for phase in compute_bound.PHASES)
    out[f"{name}_bound_s"] = total
    out[f"{name}_over_bound"] = wall / total if total else float("nan")
    # the decode tail: a step reads all the weights however few rows it runs (calls' tokens are the step's rows)
    steps = [c.tokens for p in profiles for c in p.calls if c.phase == "decode"]
    if steps:
        out[f"{name}_decode_steps"] = len(steps) / len(profiles)
        out[f"{name}_decode_rows_mean"] = sum(steps) / len(steps)
        out[f"{name}_decode_steps_share_1_2_rows"] = sum(r <= 2 for r in steps) / len(steps)
    # the bound before its memory terms (one layer timed alone, KV-cache reads free): for comparison with older runs
    flop = sum(compute_bound.flop_bound(p.calls, matmul) for p in profiles) / len(profiles)
    out[f"{name}_flop_bound_s"] = flop
    out[f"{name}_over_flop_bound"] = wall / flop if flop else float("nan")
    # CPU seconds the process spent (all its threads): on a machine shared with other jobs the wall time also counts
    # the time the scheduler gave to them, which no change to this code can win back
    cpu = statistics.median(p.cpu_seconds for p in profiles)
    out[f"{name}_cpu_s"] = cpu
    out[f"{name}_cpu_over_bound"] = cpu / total if total else float("nan")
    return out


# rows of a model call (sequences in a prefill, the batch in a decode step): with a batch of 16, 1-2 rows is the
# batch's tail (the question with the longest chain of rounds decoding alone) and the prompts that rejoin one or two
# at a time after a retrieval; the shared head's own prefill (one row) counts among the 1-2-row prefills
ROW_BUCKETS = ((1, 2), (3, 8), (9, None))
TIMED_PHASES = ("prefill", "decode")  # the decoder's own model calls


def bucket_name(low: int, high: int | None) -> str:
    return f"{low}_{high}" if high else f"{low}_up"


def row_bucket(rows: int) -> str:
    return next(bucket_name(low, high) for low, high in ROW_BUCKETS if high is None or rows <= high)


def timed_calls(profiles: list[Profile]) -> bool:
    """Did the runner time its model calls one by one (the engine's decoder does; the baselines' ``generate`` runs
    its steps inside one call)?"""
    return any(c.seconds is not None for p in profiles for c in p.calls)


def distance_by_rows(name: str, profiles: list[Profile], matmul) -> dict[str, float]:
    """Where a runner's distance to its bound is: its timed prefill and decode calls grouped by the rows they ran,
    each group's calls, wall seconds and bound per run (means over the rounds; the run's own wall ÷ bound takes the
    median round), and wall ÷ bound."""
    groups: dict[str, list] = {}
    for p in profiles:
        for call in p.calls:
            if call.seconds is not None and call.phase in TIMED_PHASES:
                groups.setdefault(f"{name}_{call.phase}_rows_{row_bucket(call.logits)}", []).append(call)
    out: dict[str, float] = {}
    for key, timed in groups.items():
        wall = sum(c.seconds for c in timed) / len(profiles)
        bound = sum(f["bound_s"] for f in compute_bound.bound(timed, matmul).values()) / len(profiles)
        out[f"{key}_calls"] = len(timed) / len(profiles)
        out[f"{key}_wall_s"], out[f"{key}_bound_s"] = wall, bound
        out[f"{key}_over_bound"] = wall / bound if bound else float("nan")
    return out


def print_distance_by_rows(results: dict, runners: list[str]) -> None:
    rows = []
    for phase in TIMED_PHASES:
        for low, high in ROW_BUCKETS:
            cells = []
            for name in runners:
                key = f"{name}_{phase}_rows_{bucket_name(low, high)}"
                cells.append(f"{results[key + '_calls']:.0f} / {results[key + '_wall_s']:.2f} / "
                             f"{results[key + '_bound_s']:.2f} / x{results[key + '_over_bound']:.2f}"
                             if key + "_calls" in results else None)
            if any(cells):
                rows.append([f"{phase}, {low}-{high} rows" if high else f"{phase}, {low}+ rows"] + cells)
    if rows:
        print("model calls by the rows they ran: calls / wall s / bound s / wall ÷ bound, per run")
        harness.print_table(["phase, rows per call"] + runners, rows)
        print()


def print_bound(results: dict, runners: list[str], matmul, batch: int) -> None:
    rates = "  ".join(f"{r} rows {matmul.rate(r) / 1e9:.0f}" for r in sorted({1, batch, matmul.rows[-1]}))
    print(f"compute bound: the model's linear layers on this machine (every layer in turn), GFLOP/s at {rates}, "
          f"saturated {matmul.saturated_rate / 1e9:.0f} (LM head at 1 row {matmul.head_rate(1) / 1e9:.0f}); weights "
          f"read at {matmul.memory_rate / 1e9:.1f} GB/s by a one-row pass; model calls priced at those rates, decode "
          "steps with their KV-cache reads (bench/compute_bound.py)")
    rows = []
    for phase in compute_bound.PHASES:
        for field, label in (("tokens", "tokens"), ("gflop", "GFLOP"), ("kv_gb", "KV-cache GB read"),
                             ("bound_s", "bound s")):
            if field == "kv_gb" and phase != "decode":
                continue
            rows.append([f"{phase} {label}"] + [results.get(f"{name}_{phase}_{field}") for name in runners])
        rows.append([f"{phase} wall s"] + [results.get(f"{name}_{phase}_s") for name in runners])
    rows.append(["run bound s"] + [results[f"{name}_bound_s"] for name in runners])
    rows.append(["run wall s (median)"] + [results[f"{name}_seconds"] for name in runners])
    rows.append(["wall ÷ bound"] + [results[f"{name}_over_bound"] for name in runners])
    rows.append(["decode steps (rows per step, share at 1-2 rows)"] +
                [f"{results[f'{n}_decode_steps']:.0f} ({results[f'{n}_decode_rows_mean']:.1f}, "
                 f"{results[f'{n}_decode_steps_share_1_2_rows']:.0%})" if f"{n}_decode_steps" in results else None
                 for n in runners])
    rows.append(["FLOP-only bound s (one layer, no KV reads)"] + [results[f"{name}_flop_bound_s"] for name in runners])
    rows.append(["wall ÷ FLOP-only bound"] + [results[f"{name}_over_flop_bound"] for name in runners])
    rows.append(["CPU s (process)"] + [results[f"{name}_cpu_s"] for name in runners])
    rows.append(["CPU ÷ bound"] + [results[f"{name}_cpu_over_bound"] for name in runners])
    harness.print_table(["per run"] + runners, rows, floats=".2f")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dataset", default="world-two-hop", help="an embedded set or a QA file (HotpotQA: "
                        "data/hotpotqa/hotpot_dev_distractor_v1.json with --index)")
    parser.add_argument("--index", default=None, help="index folder (required for a QA file)")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--batch_size", "--batch-size",
                        type=int, default=64, help="the engine's batch (default: the whole default "
                        "question set at once, the fastest on a CPU: every decode step reads the weights once)")
    parser.add_argument("--theta", type=float, default=0.5)
    parser.add_argument("--max_new_tokens", "--max-new-tokens", type=int, default=48)
    parser.add_argument("--prompt_style", "--prompt-style", default="chat", choices=["chat", "paper"])
    parser.add_argument("--demos", default="hotpotqa")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                        help="auto: bf16 on a CPU where a probe finds it faster (then greedy outputs of the two "
                             "runners can part at near ties); float32 for exact agreement")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of baseline and engine")
    parser.add_argument("--shared_head", "--shared-head", default="on", choices=["on", "off", "both"],
                        help="prefill the prompts' shared head once (both: run the engine with and without)")
    parser.add_argument("--packed_linears", "--packed-linears", default="on", choices=["on", "off", "both"],
                        help="bf16 on a CPU: the engine's linear layers on weights prepacked once (same bits as the "
                             "stock layers; both: run the engine with and without)")
    parser.add_argument("--dragin_profile", "--dragin-profile", default="paper", choices=["paper", "reference"],
                        help="which reading of DRAGIN (inference/dynamic_rag/methods.py); the authors' code is "
                             "'reference'")
    parser.add_argument("--qfs_top_n", "--qfs-top-n", type=int, default=None, help="QFS words (default: the profile's)")
    parser.add_argument("--head_attention", "--head-attention",
                        default="auto", choices=["auto", "once", "per-row", "both"],
                        help="decode steps score the shared head once for the batch, or read a copy per row (auto: "
                             "the decoder's choice; both: the engine once, and per row as engine_head_per_row)")
    parser.add_argument("--replay", default="on", choices=["on", "off"],
                        help="also run the replay (the engine's decisions without cache or batch, full attention "
                             "passes): the check that outputs are identical, and the older baseline")
    parser.add_argument("--authors_attn", "--authors-attn", default="eager", choices=["eager", "sdpa"],
                        help="attention of the authors' generate (their code gets eager with current transformers)")
    parser.add_argument("--overhead", default="on", choices=["on", "off"],
                        help="also time plain generate against the signal decoder")
    parser.add_argument("--op_profile", "--op-profile", default=None, metavar="PATH",
                        help="after the timed rounds, run the engine once more under torch.profiler and write its "
                             "operators by their own time to PATH: where the model calls' time goes")
    harness.add_threads_arg(parser)
    harness.add_json_arg(parser)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    harness.set_threads(args.threads)
    torch.manual_seed(0)

    examples = load_questions(QuestionSet(args.dataset, limit=args.questions))
    retriever = load_eval_retriever(args.index, args.dataset)
    model, tokenizer = load_causal_lm(args.model, ModelOptions(dtype=args.dtype))
    prompts = PromptBuilder(tokenizer, PromptConfig(prompt_style=args.prompt_style, demos=args.demos))
    method = MethodConfig(method="dragin", theta=args.theta, dragin_profile=args.dragin_profile,
                          qfs_top_n=args.qfs_top_n)
    # shared_head False: run_engine sets the head itself (--shared_head), so that it is prefilled once per run
    cfg = EngineConfig(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, shared_head=False,
                       packed_linears=args.packed_linears != "off")
    head = prompt_head_ids(tokenizer, prompts)
    # each engine variant: the shared head it gets (None: off) and its config
    once = {"auto": None, "once": True, "per-row": False, "both": True}[args.head_attention]
    engines = {"engine": (head if args.shared_head != "off" else None, cfg, once)}
    if args.shared_head == "both":
        engines = {"engine_no_head": (None, cfg, once), **engines}
    if args.head_attention == "both":
        engines = {"engine_head_per_row": (engines["engine"][0], cfg, False), **engines}
    if args.packed_linears == "both":
        engines = {"engine_stock_linears": (engines["engine"][0], replace(cfg, packed_linears=False), once),
                   **engines}

    baselines = {"authors": AuthorsPatternDragin(model, tokenizer, retriever, prompts, method, args.max_new_tokens,
                                                 attn=args.authors_attn)}
    if args.replay == "on":
        baselines["replay"] = DraginReplay(model, tokenizer, retriever, prompts, method, args.max_new_tokens)
    # warm-up outside the timing (lazy loads: the sentencizer, kernels' first calls), one question each; the
    # sentencizer only loads when a trigger fires, which the warm-up question may not do
    split_sentences("Warm up. The sentencizer.")
    for base in baselines.values():
        run_baseline(base, examples[:1], tokenizer)
        base.forward_passes = 0
    run_engine(lambda: DynamicRAGEngine(model, tokenizer, retriever, prompts, method, cfg), examples[:1], tokenizer,
               head)
    seconds: dict[str, list[float]] = {name: [] for name in [*baselines, *engines]}
    profiles: dict[str, list[Profile]] = {name: [] for name in seconds}
    records, passes, loads, plain_vs_signals = {}, {}, [os.getloadavg()], []
    plain_prompts = [prompts.build(e.question, []).text for e in examples]
    packing = linear_packing(model, enabled=cfg.packed_linears)  # the one the engines' decoders use
    packed_layers = f"{len(packing)} linear layers prepacked" if packing else f"stock linear layers ({packing.reason})"
    print(f"{len(examples)} questions, {args.prompt_style} prompt, shared head {len(head)} tokens, {model.dtype}, "
          f"{packed_layers}, {torch.get_num_threads()} threads; "
          f"load average {loads[0][0]:.2f} {loads[0][1]:.2f} {loads[0][2]:.2f}", flush=True)
    matmul = compute_bound.probe(model, packed_linears=cfg.packed_linears)  # this machine's rate, in this run
    for r in range(args.repeats):
        for name, base in baselines.items():
            records[name], t, prof = run_baseline(base, examples, tokenizer)
            seconds[name].append(t)
            profiles[name].append(prof)
        for name, (h, c, once) in engines.items():
            records[name], t, prof, passes[name] = run_engine(
                lambda c=c: DynamicRAGEngine(model, tokenizer, retriever, prompts, method, c), examples, tokenizer, h,
                once)
            seconds[name].append(t)
            profiles[name].append(prof)
        if args.overhead == "on":
            plain_vs_signals.append(overhead(model, tokenizer, plain_prompts, args.batch_size, args.max_new_tokens,
                                             cfg.packed_linears))
        print(f"  round {r + 1}: " + "  ".join(f"{n} {s[-1]:.1f}s" for n, s in seconds.items()) +
              f"  load {harness.load_1min()}", flush=True)
    loads.append(os.getloadavg())
    matmul = compute_bound.fastest(matmul, compute_bound.probe(model, packed_linears=cfg.packed_linears))
    if args.op_profile:  # outside the rounds: the profiler's own cost must not reach the figures
        h, c, once = engines["engine"]
        table = harness.operator_table(lambda: run_engine(
            lambda: DynamicRAGEngine(model, tokenizer, retriever, prompts, method, c), examples, tokenizer, h, once),
            args.op_profile)
        print("\nthe engine's operators by their own time (one more run, profiled):")
        print("\n".join(table.splitlines()[:14]))
        print(f"(the whole table: {args.op_profile})")

    n = len(examples)

    def share_same(a_name: str, b_name: str, key) -> float:
        return sum(key(a) == key(b) for a, b in zip(records[a_name], records[b_name])) / n

    def queries(r):
        return [x["query"] for x in r["retrievals"]]

    results = {
        "questions": n, "batch_size": args.batch_size, "theta": args.theta, "prompt_style": args.prompt_style,
        "dataset": args.dataset, "dragin_profile": args.dragin_profile, "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats, "shared_head_tokens": len(head),
        "threads": torch.get_num_threads(), "dtype": str(model.dtype).removeprefix("torch."),
        "packed_linears": args.packed_linears, "packed_linear_layers": len(packing), "authors_attn": args.authors_attn,
        "ratio_divides": "authors ÷ engine (ratio); replay ÷ engine (ratio_replay)",
        "identical_outputs_authors": share_same("authors", "engine", lambda r: r["output"]),
        **({"identical_outputs": share_same("replay", "engine", lambda r: r["output"]),
            "identical_queries": share_same("replay", "engine", queries)} if "replay" in records else {}),
        **({f"identical_queries_{name.removeprefix('engine_')}": share_same("replay", name, queries)
            for name in engines if name != "engine"} if "replay" in records else {}),
        **({"identical_outputs_head_vs_no_head": share_same("engine_no_head", "engine", lambda r: r["output"])}
           if "engine_no_head" in records else {}),
        **({"identical_outputs_head_once_vs_per_row": share_same("engine_head_per_row", "engine",
                                                                 lambda r: r["output"])}
           if "engine_head_per_row" in records else {}),
        **{f"{name}_retrievals_per_q": sum(len(r["retrievals"]) for r in recs) / n for name, recs in records.items()},
        **{f"{name}_forward_passes": base.forward_passes // args.repeats for name, base in baselines.items()},
        **{f"{name}_forward_passes": p for name, p in passes.items()},
        "load_1min_start": loads[0][0], "load_5min_start": loads[0][1], "load_1min_end": loads[1][0],
        "load_5min_end": loads[1][1],
        **compute_bound.probe_figures(matmul, args.batch_size),
    }
    if plain_vs_signals:
        results.update({
            "plain_generate_seconds": statistics.median(p for p, _ in plain_vs_signals),
            "signal_decode_seconds": statistics.median(s for _, s in plain_vs_signals),
            "signals_over_plain": statistics.median(s / p for p, s in plain_vs_signals),
            "signals_over_plain_runs": [s / p for p, s in plain_vs_signals]})
    timed = [name for name in seconds if timed_calls(profiles[name])]  # the engines: calls timed one by one
    for name, runs in seconds.items():
        median, low, high = harness.spread(runs)
        results[f"{name}_seconds"], results[f"{name}_seconds_min"], results[f"{name}_seconds_max"] = median, low, high
        results[f"{name}_seconds_mean"] = sum(runs) / len(runs)
        results[f"{name}_seconds_runs"] = runs
        results.update(profile_figures(name, profiles[name], runs, n))
        results.update(bound_figures(name, profiles[name], matmul, median))
        if name in timed:
            results.update(distance_by_rows(name, profiles[name], matmul))
    ratio_keys = []
    for base in baselines:
        for name in engines:
            key = "ratio" + ("" if base == "authors" else f"_{base}") + (
                "" if name == "engine" else f"_{name.removeprefix('engine_')}")
            ratios = [a / b for a, b in zip(seconds[base], seconds[name])]
            results[key], results[f"{key}_min"], results[f"{key}_max"] = harness.spread(ratios)
            results[f"{key}_runs"] = ratios
            ratio_keys.append((key, base, name))

    labels = {"authors": "authors' pattern (1 at a time)", "replay": "replay (1 at a time, full passes)"}
    harness.print_table(["run", "seconds (median)", "min-max", "s/question", "retrievals/q", "forward passes"],
                        [[labels.get(name, f"{name} (batch {args.batch_size})"), results[f"{name}_seconds"],
                          f"{min(seconds[name]):.1f}-{max(seconds[name]):.1f}", results[f"{name}_seconds"] / n,
                          results[f"{name}_retrievals_per_q"], results[f"{name}_forward_passes"]]
                         for name in seconds], floats=".2f")
    print()
    print_profile(results, list(seconds))
    print()
    print_bound(results, list(seconds), matmul, args.batch_size)
    print()
    print_distance_by_rows(results, timed)
    if "identical_outputs" in results:
        print(f"engine vs replay: identical greedy outputs {results['identical_outputs']:.2%}, identical query "
              f"sequences {results['identical_queries']:.2%}")
    print(f"engine vs authors' pattern (other attention rows, so other decisions): identical outputs "
          f"{results['identical_outputs_authors']:.2%}"
          + (f"; engine with and without the shared head: {results['identical_outputs_head_vs_no_head']:.2%} "
             "identical" if "identical_outputs_head_vs_no_head" in results else "")
          + (f"; head once vs per row: {results['identical_outputs_head_once_vs_per_row']:.2%} identical"
             if "identical_outputs_head_once_vs_per_row" in results else ""))
    if plain_vs_signals:
        print(f"plain generate vs signal decoder, batch {args.batch_size} × {args.max_new_tokens} tokens: "
              f"{results['plain_generate_seconds']:.1f}s vs {results['signal_decode_seconds']:.1f}s (× "
              f"{results['signals_over_plain']:.2f}, median of {args.repeats})")
    for key, base, name in ratio_keys:
        print(f"{key} ({base} ÷ {name} wall time, median of {args.repeats}): {results[key]:.1f} "
              f"(spread {results[key + '_min']:.1f}-{results[key + '_max']:.1f})")
    print(f"load average {loads[0][0]:.2f} -> {loads[1][0]:.2f} (1 min), {torch.get_num_threads()} torch threads")
    harness.write_json(args.json, results)


if __name__ == "__main__":
    main()
