"""DRAGIN the reference way (baseline) against the batched engine, on the same questions and the same model.

    python bench/dynamic_rag.py --json runs/bench/dynamic_rag.json
    python bench/dynamic_rag.py --questions 64 --batch-size 32 --theta 0.5 --dataset world-two-hop

(a) baseline, ``bench/dragin_reference.py``: one question at a time, ``generate``, then extra full forward passes
with attentions for RIND and QFS after each round; (b) the engine: all questions batched, signals captured while
decoding with the KV cache. Reports the share of identical greedy outputs and the speed-up (headline ``ratio``),
plus the engine's overhead: generation with signals ÷ plain ``generate`` at the same batch size.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dragin_reference import ReferenceDragin  # noqa: E402

from inference.core.decoder import BatchDecoder, Sequence  # noqa: E402
from inference.core.models import load_causal_lm  # noqa: E402
from inference.core.tokenization import batch_prompt_ids  # noqa: E402
from inference.engine import DynamicRAGEngine, EngineConfig  # noqa: E402
from inference.eval_data import load_eval_retriever, load_examples  # noqa: E402
from inference.methods import MethodConfig  # noqa: E402
from inference.prompts import PromptBuilder, PromptConfig  # noqa: E402


def overhead(model, tokenizer, prompts: list[str], batch_size: int, new_tokens: int) -> tuple[float, float]:
    """Seconds for ``new_tokens`` greedy tokens per prompt: plain ``generate`` vs the signal decoder, same batch."""
    ids = batch_prompt_ids(tokenizer, prompts[:batch_size])  # the engine's own ids, BOS included where it belongs
    batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt")
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(**batch, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                       pad_token_id=tokenizer.pad_token_id)
    t_plain = time.perf_counter() - start
    dec = BatchDecoder(model, tokenizer, stop_token_ids=set())
    dec.stop_token_ids = set()  # same token count as generate(min_new_tokens=...)
    seqs = [Sequence(i, list(p), new_tokens) for i, p in enumerate(ids)]
    start = time.perf_counter()
    dec.admit(seqs)
    while dec.active:
        dec.step()
    t_signals = time.perf_counter() - start
    model.set_attn_implementation("sdpa")
    return t_plain, t_signals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dataset", default="world-two-hop")
    parser.add_argument("--index", default=None)
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--theta", type=float, default=0.5)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--prompt-style", default="chat", choices=["chat", "paper"])
    parser.add_argument("--demos", default="hotpotqa")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.manual_seed(0)

    examples = load_examples(args.dataset, limit=args.questions)
    retriever = load_eval_retriever(args.index, args.dataset)
    model, tokenizer = load_causal_lm(args.model)
    prompts = PromptBuilder(tokenizer, PromptConfig(prompt_style=args.prompt_style, demos=args.demos))
    method = MethodConfig(method="dragin", theta=args.theta)

    ref = ReferenceDragin(model, tokenizer, retriever, prompts, method, args.max_new_tokens)
    ref_records, t_ref = ref.run(examples)
    engine = DynamicRAGEngine(model, tokenizer, retriever, prompts, method,
                              EngineConfig(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens))
    start = time.perf_counter()
    eng_records = engine.run(examples, show_progress=False)
    t_eng = time.perf_counter() - start
    model.set_attn_implementation("sdpa")

    same = sum(a["output"] == b["output"] for a, b in zip(ref_records, eng_records)) / len(examples)
    same_queries = sum([r["query"] for r in a["retrievals"]] == [r["query"] for r in b["retrievals"]]
                       for a, b in zip(ref_records, eng_records)) / len(examples)
    plain_prompts = [prompts.build(e.question, []).text for e in examples]
    t_plain, t_signals = overhead(model, tokenizer, plain_prompts, args.batch_size, args.max_new_tokens)
    results = {
        "questions": len(examples), "batch_size": args.batch_size, "theta": args.theta,
        "reference_seconds": t_ref, "engine_seconds": t_eng, "ratio": t_ref / t_eng,
        "identical_outputs": same, "identical_queries": same_queries,
        "reference_retrievals_per_q": sum(len(r["retrievals"]) for r in ref_records) / len(examples),
        "engine_retrievals_per_q": sum(len(r["retrievals"]) for r in eng_records) / len(examples),
        "reference_forward_passes": ref.forward_passes,
        "engine_forward_passes": engine.decoder.forward_passes,
        "plain_generate_seconds": t_plain, "signal_decode_seconds": t_signals,
        "signals_over_plain": t_signals / t_plain,
    }
    print(f"{'run':28s} {'seconds':>8s} {'s/question':>10s} {'retrievals/q':>12s}")
    print(f"{'reference (1 at a time)':28s} {t_ref:8.1f} {t_ref / len(examples):10.2f} "
          f"{results['reference_retrievals_per_q']:12.2f}")
    print(f"{'engine (batch ' + str(args.batch_size) + ')':28s} {t_eng:8.1f} {t_eng / len(examples):10.2f} "
          f"{results['engine_retrievals_per_q']:12.2f}")
    print(f"identical greedy outputs: {same:.2%}; identical query sequences: {same_queries:.2%}")
    print(f"plain generate vs signal decoder, batch {args.batch_size} × {args.max_new_tokens} tokens: "
          f"{t_plain:.1f}s vs {t_signals:.1f}s (× {results['signals_over_plain']:.2f})")
    print(f"ratio (reference ÷ engine wall time): {results['ratio']:.1f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
