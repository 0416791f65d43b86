"""The engine's seconds per question on a Llama-2-7B-shaped model (random weights) at batch 1, 16 and 64: the scale a
GPU run of DRAGIN needs, next to the authors' published 7.73 s per question (Llama-2-7B on HotpotQA, two GPUs, their
reproducibility guide).

    python bench/gpu_scale.py --json runs/bench/gpu_scale.json          # on a GPU: 7B shape, bf16, batch 1 16 64
    python bench/gpu_scale.py --shape tiny --device cpu --dtype float32 --questions 4 --batch_sizes 1,2 \\
        --max_new_tokens 4                                              # the same code on a 2-layer model, anywhere

Workload, per question: the paper prompt (the 8 HotpotQA few-shot demos, then a question of the embedded world) and
DRAGIN's first round: ``--max_new_tokens`` greedy tokens with the last layer's attention and every token's entropy
captured, as RIND reads them, the demos prefilled once for all questions. θ is out of reach, so nothing is
retrieved (the triggers of a random model mean nothing) and every question generates the same number of tokens:
the LM head's rows of the stop tokens are zero, so no end of turn comes early; the script reports the tokens it got.
A real run adds retrieval rounds (the authors' code averaged about 1.2 per HotpotQA question with SmolLM2); their
7.73 s covers those, so ``published_ratio`` compares a first round with a whole question and is an upper estimate.

The model: Llama-2-7B's layout (4,096 wide, 32 layers, 32 heads without grouping, MLP 11,008, untied LM head) with
SmolLM2's tokenizer, so the vocabulary is 49,152 rows instead of 32,000 (1% more weights).
Each batch size runs the same questions after one untimed warm-up (kernels' first calls); batch 1 runs the first
``--questions_at_batch_1`` of them (one question at a time is slow on a 7B model). ``auto`` among the batch sizes
(``--batch_sizes 1,16,64,auto``) runs the batch the engine plans from the free memory
(inference/dynamic_rag/batch_plan.py) and prints the plan's estimate beside the peak measured at that batch.

``ratio``: seconds per question at batch 1 ÷ at the largest batch, both measured in this run. ``published_ratio``:
7.73 ÷ seconds per question at the largest batch (a published figure, not measured here).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

from adaptive_rag.lm.decoder import stop_token_ids  # noqa: E402
from adaptive_rag.lm.models import load_tokenizer  # noqa: E402
from adaptive_rag.plumbing.question_set import QuestionSet  # noqa: E402
from data_builders.question_loader import load_questions  # noqa: E402
from inference.commands.eval_data import load_eval_retriever  # noqa: E402
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig  # noqa: E402
from inference.dynamic_rag.methods import MethodConfig  # noqa: E402
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig  # noqa: E402

PUBLISHED_SECONDS = 7.73  # DRAGIN, Llama-2-7b-chat, HotpotQA, two GPUs (the authors' reproducibility guide)
SHAPES = {
    "llama-2-7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-5},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "rms_norm_eps": 1e-5},
}
OUT_OF_REACH = 1e9  # θ no RIND score reaches: no retrieval, one round per question


def random_model(shape: str, tokenizer, device: torch.device, dtype: torch.dtype):
    """A Llama of ``shape`` with random weights, built on ``device`` in ``dtype`` (no copy through the CPU), its LM
    head blind to the stop tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=False,
                      pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, **SHAPES[shape])
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():  # a zero row's logit is 0; the largest of 49,152 random logits is far above it
        model.lm_head.weight[sorted(stop_token_ids(tokenizer) | {tokenizer.eos_token_id})] = 0
    return model.eval()


def run_batch(model, tokenizer, retriever, prompts, method, examples, batch: int, new_tokens: int) -> dict:
    engine = DynamicRAGEngine(model, tokenizer, retriever, prompts, method,
                              EngineConfig(batch_size=batch, max_new_tokens=new_tokens))
    engine.run(examples[:min(engine.batch_size, 2)], show_progress=False)  # warm-up: the kernels' first calls
    sync(model)
    start = time.perf_counter()
    records = engine.run(examples, show_progress=False)
    sync(model)
    seconds = time.perf_counter() - start
    tokens = [r.generated_tokens for r in records]
    return {"questions": len(examples), "seconds": seconds, "seconds_per_q": seconds / len(examples),
            "tokens_per_q": sum(tokens) / len(tokens), "short_answers": sum(t < new_tokens for t in tokens),
            "retrievals": sum(len(r.retrievals) for r in records), "plan": engine.batch.record()}


def sync(model) -> None:
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="llama-2-7b", choices=sorted(SHAPES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--batch_sizes", "--batch-sizes", default="1,16,64",
                        help="comma-separated; auto: the batch the engine plans from the free memory")
    parser.add_argument("--questions", type=int, default=64, help="questions at every batch size but 1")
    parser.add_argument("--questions_at_batch_1", "--questions-at-batch-1", type=int, default=8)
    parser.add_argument("--max_new_tokens", "--max-new-tokens", type=int, default=100)
    harness.add_threads_arg(parser)
    harness.add_json_arg(parser)
    args = parser.parse_args()
    sizes = args.batch_sizes.split(",")
    try:
        batches = sorted({int(b) for b in sizes if b != "auto"}) + ["auto"] * ("auto" in sizes)
    except ValueError:
        parser.error(f"--batch_sizes must be integers or auto separated by commas, got '{args.batch_sizes}'")
    if (batches[0] != "auto" and batches[0] < 1) or min(args.questions, args.questions_at_batch_1,
                                                         args.max_new_tokens) < 1:
        parser.error("batch sizes, question counts and --max_new_tokens must be positive")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here: run it on a GPU machine, or pass --device cpu (with --shape tiny)")
    harness.set_threads(args.threads)

    tokenizer = load_tokenizer("smollm2-135m")
    model = random_model(args.shape, tokenizer, device, getattr(torch, args.dtype))
    prompts = PromptBuilder(tokenizer, PromptConfig(prompt_style="paper", demos="hotpotqa"))
    method = MethodConfig(method="dragin", theta=OUT_OF_REACH)
    examples = load_questions(QuestionSet("world-two-hop", limit=args.questions))
    retriever = load_eval_retriever(None, "world-two-hop")
    params = sum(p.numel() for p in model.parameters())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{args.shape} shape, {params / 1e9:.2f}B parameters, {args.dtype}, {name}; {len(examples)} questions, "
          f"{args.max_new_tokens} tokens each; load average {harness.load_1min()}", flush=True)

    results = {"shape": args.shape, "parameters": params, "dtype": args.dtype, "device": name,
               "max_new_tokens": args.max_new_tokens, "published_seconds_per_q": PUBLISHED_SECONDS,
               "load_1min_start": os.getloadavg()[0]}
    rows = []
    for batch in batches:
        subset = examples[:args.questions_at_batch_1] if batch == 1 else examples
        fig = run_batch(model, tokenizer, retriever, prompts, method, subset, batch, args.max_new_tokens)
        plan = fig.pop("plan")
        if device.type == "cuda":
            fig["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
            torch.cuda.reset_peak_memory_stats(device)
        results.update({f"batch_{batch}_{k}": v for k, v in fig.items()})
        if batch == "auto":  # the plan's choice, and its estimate beside the peak measured at that batch
            halvings = plan.pop("halvings", [])  # after an out-of-memory error; the figures stay flat
            results.update({**{f"auto_{k}": v for k, v in plan.items()}, "auto_halvings": len(halvings)})
            print(f"  auto: batch {plan['batch_size']} ({plan['chosen_by']}, estimated "
                  f"{plan.get('row_gib', 0) * plan['batch_size']:.2f} GiB at that batch"
                  + (f"; measured peak {fig['peak_gib']:.2f} GiB, weights included" if "peak_gib" in fig else "")
                  + ")", flush=True)
        rows.append([f"{batch} ({plan['batch_size']})" if batch == "auto" else batch, fig["questions"], fig["seconds"],
                     fig["seconds_per_q"], fig["tokens_per_q"], PUBLISHED_SECONDS / fig["seconds_per_q"]])
        print(f"  batch {batch}: {fig['seconds_per_q']:.3f} s per question", flush=True)
    largest = results[f"batch_{batches[-1]}_seconds_per_q"]
    results["published_ratio"] = PUBLISHED_SECONDS / largest
    if batches[0] == 1 and len(batches) > 1:
        results["ratio"] = results["batch_1_seconds_per_q"] / largest
    results["load_1min_end"] = os.getloadavg()[0]
    harness.print_table(["batch", "questions", "seconds", "s/question", "tokens/q", "x the published 7.73 s"], rows,
                        floats=".3f")
    if "ratio" in results:
        print(f"ratio (s/q at batch 1 ÷ at batch {batches[-1]}): x{results['ratio']:.1f}")
    print(f"published_ratio (7.73 s ÷ s/q at batch {batches[-1]}, a first round against a whole question): "
          f"x{results['published_ratio']:.1f}")
    short = sum(results[f"batch_{b}_short_answers"] for b in batches)
    if short:
        print(f"warning: {short} answers ended before {args.max_new_tokens} tokens", file=sys.stderr)
    harness.write_json(args.json, results)


if __name__ == "__main__":
    main()
