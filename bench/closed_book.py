"""Algorithm 1's closed-book pass against plain transformers ``generate`` (baseline), same questions and batch size.

    python bench/closed_book.py --json runs/bench/closed_book.json
    python bench/closed_book.py --questions 64 --batch_size 16 --max_new_tokens 20 --pairs 2 --dtype float32

(a) baseline: ``model.generate`` over batches of ``--batch_size`` left-padded NR prompts, greedy, stopping at the
same end tokens; (b) the pass ADAPT-LLM's data builder runs: ``data_builders.adapt_closed_book.model_closed_book_fn``
(its ``generate_texts`` on the engine's decoder: continuous batching, longest prompts first), called batch by
batch as ``answer_closed_book`` calls it. Both on the same world questions (Algorithm 1's source); runs alternate
(A B A B ...) and the table gives medians. Headline ``ratio``: closed-book pass questions/s ÷ ``generate``'s.
Also the share of identical answers (``response_text`` of each output).
"""

from __future__ import annotations

import argparse
import statistics

import torch
from harness import add_json_arg, add_threads_arg, load_1min, set_threads, timed, write_json


def plain_generate(model, tokenizer, prompts: list[str], batch_size: int, max_new_tokens: int) -> list[str]:
    from adaptive_rag.lm.decoder import stop_token_ids
    from adaptive_rag.lm.tokenization import batch_prompt_ids

    stops = sorted(stop_token_ids(tokenizer))
    texts = []
    for start in range(0, len(prompts), batch_size):
        ids = batch_prompt_ids(tokenizer, prompts[start:start + batch_size])
        width = max(map(len, ids))
        input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(x)) + x for x in ids])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        with torch.no_grad():
            out = model.generate(input_ids=input_ids.to(model.device), attention_mask=mask.to(model.device),
                                 max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=stops,
                                 pad_token_id=tokenizer.pad_token_id)
        texts += tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--batch_size", "--batch-size",
                        type=int, default=16, help="closed_book_batch_size (the data builder's)")
    parser.add_argument("--max_new_tokens", "--max-new-tokens", type=int, default=20, help="closed_book_max_new_tokens")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--pairs", type=int, default=2, help="A B rounds; medians over them")
    add_threads_arg(parser)
    add_json_arg(parser)
    args = parser.parse_args()
    set_threads(args.threads)

    from adaptive_rag.lm.models import ModelOptions, load_causal_lm
    from data_builders.adapt_closed_book import model_closed_book_fn
    from data_builders.adapt_llm import AdaptDataConfig, load_source
    from data_builders.adapt_llm_prompts import never_retrieve_prompt, response_text

    data_cfg = AdaptDataConfig(limit=args.questions)
    examples = load_source(data_cfg)
    answer = model_closed_book_fn(args.model, data_cfg.prompt_variant, args.max_new_tokens, args.batch_size,
                                  dtype=args.dtype)
    answer(examples[:1])  # loads its model (and warms it up) outside the timing
    model, tokenizer = load_causal_lm(args.model, ModelOptions(dtype=args.dtype))
    prompts = [never_retrieve_prompt(ex.question, data_cfg.prompt_variant) for ex in examples]
    plain_generate(model, tokenizer, prompts[:2], 2, 2)  # warm-up

    def closed_book() -> list[str]:
        return [a for s in range(0, len(examples), args.batch_size) for a in answer(examples[s:s + args.batch_size])]

    times: dict[str, list[float]] = {"generate": [], "closed_book": []}
    loads = []
    for _ in range(args.pairs):
        loads.append(load_1min())
        plain, t = timed(lambda: plain_generate(model, tokenizer, prompts, args.batch_size, args.max_new_tokens))
        times["generate"].append(t)
        ours, t = timed(closed_book)
        times["closed_book"].append(t)
        print(f"  generate {times['generate'][-1]:.1f}s  closed-book pass {t:.1f}s  load {loads[-1]}", flush=True)
    n = len(examples)
    same = sum(response_text(a) == b for a, b in zip(plain, ours)) / n
    results = {"questions": n, "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens,
               "dtype": str(model.dtype).removeprefix("torch."), "threads": torch.get_num_threads(),
               "generate_qps": n / statistics.median(times["generate"]),
               "closed_book_qps": n / statistics.median(times["closed_book"]),
               "generate_seconds_runs": times["generate"], "closed_book_seconds_runs": times["closed_book"],
               "identical_answers": same, "load_1min": loads + [load_1min()]}
    results["ratio"] = results["closed_book_qps"] / results["generate_qps"]
    print(f"{'run':34s} {'questions/s':>11s}")
    print(f"{'transformers generate (batch ' + str(args.batch_size) + ')':34s} {results['generate_qps']:11.2f}")
    print(f"{'closed-book pass (generate_texts)':34s} {results['closed_book_qps']:11.2f}")
    print(f"identical answers: {same:.2%}; dtype {results['dtype']}, {results['threads']} threads")
    print(f"ratio (closed-book pass ÷ generate questions/s, median of {args.pairs}): {results['ratio']:.2f}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
