"""DRAGIN in bf16 against fp32 (baseline) on CPU: speed, and how far the RIND signals and trigger decisions drift.

    python bench/bf16_drift.py --json runs/bench/bf16_drift.json
    python bench/bf16_drift.py --questions 32 --theta 0.5 --pairs 2 --threads 2

The engine runs the same two-hop world questions with ``keep_signals`` (per word of every round: entropy H,
attention a_max, score) on the model loaded in float32 and in bfloat16; runs alternate (A B A B ...) and the
timing is the median. Drift: per question, words are compared while both runs generated the same text (rounds in
order, stopping at the first different word: greedy tokens diverged); the questions whose retrievals (positions
and queries) differ are counted. Headline ``ratio``: fp32 seconds ÷ bf16 seconds (> 1: bf16 is faster). Also
prints what ``dtype="auto"`` decides on this CPU (``adaptive_rag/lm/cpu_dtype.py``) and the probe's numbers.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from harness import add_json_arg, add_threads_arg, load_1min, set_threads, write_json


def common_words(a: dict, b: dict) -> tuple[list[tuple[dict, dict]], bool]:
    """Word pairs of two records' signals while their texts agree; and whether they diverged before the end."""
    pairs = []
    for round_a, round_b in zip(a.get("signals", []), b.get("signals", [])):
        for wa, wb in zip(round_a["words"], round_b["words"]):
            if wa["text"] != wb["text"]:
                return pairs, True
            pairs.append((wa, wb))
        if len(round_a["words"]) != len(round_b["words"]):
            return pairs, True
    return pairs, len(a.get("signals", [])) != len(b.get("signals", []))


def drift(fp32: list[dict], bf16: list[dict], theta: float) -> dict[str, float]:
    dh, da, rel_h, rel_a, flips, words = [], [], [], [], 0, 0
    diverged = 0
    for a, b in zip(fp32, bf16):
        pairs, split = common_words(a, b)
        diverged += split
        for wa, wb in pairs:
            words += 1
            dh.append(abs(wa["entropy"] - wb["entropy"]))
            da.append(abs(wa["attention"] - wb["attention"]))
            rel_h.append(dh[-1] / max(abs(wa["entropy"]), 1e-6))
            rel_a.append(da[-1] / max(abs(wa["attention"]), 1e-9))
            flips += (wa["score"] > theta) != (wb["score"] > theta)
    key = lambda r: [(x["position"], x["query"]) for x in r["retrievals"]]  # noqa: E731
    n = len(fp32)
    return {
        "words_compared": words, "questions_diverged": diverged,
        "entropy_abs_diff_mean": statistics.fmean(dh) if dh else 0.0, "entropy_abs_diff_max": max(dh, default=0.0),
        "entropy_rel_diff_median": statistics.median(rel_h) if rel_h else 0.0,
        "attention_abs_diff_mean": statistics.fmean(da) if da else 0.0,
        "attention_abs_diff_max": max(da, default=0.0),
        "attention_rel_diff_median": statistics.median(rel_a) if rel_a else 0.0,
        "score_threshold_flips": flips,
        "questions_retrievals_differ": sum(key(a) != key(b) for a, b in zip(fp32, bf16)),
        "questions_output_differs": sum(a["output"] != b["output"] for a, b in zip(fp32, bf16)),
        "fp32_retrievals": sum(len(r["retrievals"]) for r in fp32),
        "bf16_retrievals": sum(len(r["retrievals"]) for r in bf16),
        "questions": n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dataset", default="world-two-hop")
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--batch_size", "--batch-size", type=int, default=16)
    parser.add_argument("--theta", type=float, default=0.5)
    parser.add_argument("--max_new_tokens", "--max-new-tokens", type=int, default=48)
    parser.add_argument("--profile", default="paper", choices=["paper", "reference"], help="--dragin_profile")
    parser.add_argument("--pairs", type=int, default=2, help="A B rounds; medians over them")
    add_threads_arg(parser)
    add_json_arg(parser)
    args = parser.parse_args()
    set_threads(args.threads)

    from adaptive_rag.lm.cpu_dtype import cpu_auto_decision
    from adaptive_rag.lm.models import ModelOptions, load_causal_lm
    from adaptive_rag.plumbing.question_set import QuestionSet
    from data_builders.question_loader import load_questions
    from inference.commands.eval_data import load_eval_retriever
    from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
    from inference.dynamic_rag.methods import MethodConfig
    from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

    decision = cpu_auto_decision()
    print(decision.describe())
    examples = load_questions(QuestionSet(args.dataset, limit=args.questions))
    retriever = load_eval_retriever(None, args.dataset)
    models = {d: load_causal_lm(args.model, ModelOptions(dtype=d, device="cpu")) for d in ("float32", "bfloat16")}
    tokenizer = models["float32"][1]
    prompts = PromptBuilder(tokenizer, PromptConfig())
    method = MethodConfig(method="dragin", theta=args.theta, dragin_profile=args.profile)
    cfg = EngineConfig(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, keep_signals=True)
    times: dict[str, list[float]] = {d: [] for d in models}
    records: dict[str, list[dict]] = {}
    loads = []
    for _ in range(args.pairs):
        loads.append(load_1min())
        for dtype, (model, tok) in models.items():
            engine = DynamicRAGEngine(model, tok, retriever, prompts, method, cfg)
            start = time.perf_counter()
            records[dtype] = [r.to_dict() for r in engine.run(examples, show_progress=False)]
            times[dtype].append(time.perf_counter() - start)
            model.set_attn_implementation("sdpa")
        print(f"  fp32 {times['float32'][-1]:.1f}s  bf16 {times['bfloat16'][-1]:.1f}s  load {loads[-1]}", flush=True)
    fp32_s, bf16_s = statistics.median(times["float32"]), statistics.median(times["bfloat16"])
    results = {"auto_dtype": str(decision.dtype).removeprefix("torch."), "auto_reason": decision.reason,
               "cpu_capability": decision.capability, "bf16_flags": list(decision.flags),
               "probe_fp32_ms": decision.probe.fp32_s * 1e3 if decision.probe else None,
               "probe_bf16_ms": decision.probe.bf16_s * 1e3 if decision.probe else None,
               "threads": torch.get_num_threads(), "theta": args.theta, "profile": args.profile,
               "fp32_seconds": fp32_s,
               "bf16_seconds": bf16_s, "fp32_seconds_runs": times["float32"], "bf16_seconds_runs": times["bfloat16"],
               "ratio": fp32_s / bf16_s, "load_1min": loads + [load_1min()],
               **drift(records["float32"], records["bfloat16"], args.theta)}
    r = results
    print(f"{'dtype':9s} {'seconds':>8s}\n{'float32':9s} {fp32_s:8.1f}\n{'bfloat16':9s} {bf16_s:8.1f}")
    print(f"words compared (common prefix): {r['words_compared']}; greedy text diverged in "
          f"{r['questions_diverged']}/{r['questions']} questions, outputs differ in {r['questions_output_differs']}")
    print(f"entropy |Δ| mean {r['entropy_abs_diff_mean']:.4f} max {r['entropy_abs_diff_max']:.4f} (median relative "
          f"{r['entropy_rel_diff_median']:.2%}); attention |Δ| mean {r['attention_abs_diff_mean']:.4f} max "
          f"{r['attention_abs_diff_max']:.4f} (median relative {r['attention_rel_diff_median']:.2%})")
    print(f"words whose score crosses θ={args.theta} differently: {r['score_threshold_flips']}; retrievals fp32 "
          f"{r['fp32_retrievals']}, bf16 {r['bf16_retrievals']}; questions whose retrieval positions/queries "
          f"differ: {r['questions_retrievals_differ']}/{r['questions']}")
    print(f"ratio (fp32 ÷ bf16 seconds, median of {args.pairs}): {r['ratio']:.2f}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
