"""Training forward + backward with trl's fused LM head (baseline) against the labelled-positions-only head.

    python bench/sft_head.py --json runs/bench/sft_head.json
    python bench/sft_head.py --mixes adapt --batches 4 --repeats 1

On CPU trl's fused head (``trl.trainer.utils.add_fused_lm_head``) projects every position through the LM head and
masks afterwards; ``training/label_only_head.py`` projects only the positions whose next token has a label. Both
are timed on the same micro-batches at the same weights, in rotation (A B A B ...; medians per batch), through
``trainer.training_step`` (forward, loss, backward; no optimizer step), for two recipes:

* ``knowing``: the knowing model's build (``python -m training.knowing_model``): full fine-tune of SmolLM2 in its
  precision (bf16 autocast where the CPU has it), on world seed 0's training mix (passages, statements, chat Q&A);
  the replayed common-knowledge answers are stood in by "The answer is <gold>." (no model run before the bench).
* ``adapt``: ADAPT-LLM's LoRA SFT with its trainable ``<RET>`` row (``training/lora_sft.py``), on Algorithm 1's
  set over world questions (``bench/sft.py``'s stub answerer), in the recipe's precision.

``ratio``: the knowing mix's tokens/s with the labelled-only head ÷ with trl's (``ratio_adapt``: ADAPT-LLM's). The
losses and gradients of the two heads are compared on every batch (largest relative difference printed).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile

import torch
from harness import (
    add_json_arg,
    add_threads_arg,
    load_1min,
    print_table,
    rotate_training_steps,
    set_threads,
    write_json,
)

MIXES = ("knowing", "adapt")


def knowing_trainer(args):
    from training.knowing_model import build_trainer
    from training.knowing_steps import KnowingConfig

    cfg = KnowingConfig(seed=0, base_model=args.model)
    replay = [{"question": f.question, "base_answer": f"The answer is {f.answers[0]}.", "replayed": True}
              for f in _common_questions(cfg)]
    trainer, _ = build_trainer(cfg, cfg.knowing_world(), replay, tempfile.mkdtemp(prefix="bench-sft-head-"))
    return trainer


def _common_questions(cfg):
    from data_builders.knowing_world import replay_split

    replayed, _ = replay_split(cfg.seed, cfg.n_common)
    return replayed


def adapt_trainer(args):
    from sft import adapt_dataset
    from trl import SFTTrainer

    from training.adapt_llm_config import AdaptTrainConfig
    from training.adapt_llm_tokens import tokenize_split
    from training.lora_sft import add_ret_token, build_peft_model, load_base_model, sft_config

    cfg = AdaptTrainConfig(output_dir=tempfile.mkdtemp(prefix="bench-sft-head-"), micro_batch_size=8,
                           effective_batch_size=8, max_steps=1, padding_free=True, save_steps=10, report_to="none",
                           eval_steps=None, lora_dropout=0.0)
    model, tokenizer = load_base_model(args.model, cfg, "cpu")  # the recipe's precision, sdpa_varlen
    model = build_peft_model(model, cfg, add_ret_token(tokenizer, model), args.model)
    sft = sft_config(cfg, processes=1, has_eval=False)
    sft.disable_tqdm, sft.save_strategy = True, "no"
    dsd = adapt_dataset(args.questions, 40)
    return SFTTrainer(model=model, args=sft, train_dataset=tokenize_split(dsd["train"], tokenizer),
                      processing_class=tokenizer)


def paired(trainer, batches: int, repeats: int) -> dict:
    """trl's head and the labelled-only head in rotation on the first ``batches`` micro-batches."""
    from training.label_only_head import patched_model, score_labelled_only

    patched = patched_model(trainer)
    heads = {"trl": patched.forward}
    if not score_labelled_only(trainer):
        raise SystemExit("the labelled-only head applies to CPU training only")
    heads["label_only"] = patched.forward
    # trainer.train() has accelerate wrap the forward in its autocast (bf16 where the recipe trains in it) and cast
    # the outputs to float32; calling training_step directly does neither, so each head's forward gets both here
    # (the backward stays outside autocast, as there)
    from accelerate.utils import convert_outputs_to_fp32

    heads = {name: convert_outputs_to_fp32(trainer.accelerator.autocast()(forward)) for name, forward in heads.items()}
    trainer.current_gradient_accumulation_steps = 1
    data = [b for _, b in zip(range(batches), trainer.get_train_dataloader())]

    def setup(forward):
        def form(i: int) -> dict:
            patched.forward = forward
            return dict(data[i])
        return form

    seconds, loss_diff, grad_diff = rotate_training_steps(trainer, {k: setup(f) for k, f in heads.items()}, len(data),
                                                          repeats)
    tokens = sum(b["input_ids"].numel() for b in data)
    labelled = sum(int((b["labels"][..., 1:] != -100).sum()) for b in data)
    out = {"batches": len(data), "repeats": repeats, "tokens": tokens, "labelled_share": labelled / tokens,
           "loss_rel_diff_max": loss_diff, "grad_rel_diff_max": grad_diff}
    for name in heads:
        out[f"{name}_tokens_per_s"] = tokens / sum(statistics.median(t) for t in seconds[name])
    out["ratio"] = out["label_only_tokens_per_s"] / out["trl_tokens_per_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--mixes", nargs="+", default=list(MIXES), choices=MIXES)
    parser.add_argument("--batches", type=int, default=8, help="micro-batches of 8 instances each")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--questions", type=int, default=200, help="world questions for ADAPT-LLM's Algorithm 1")
    add_threads_arg(parser)
    add_json_arg(parser)
    args = parser.parse_args()
    set_threads(args.threads)
    results: dict = {"device": "cuda" if torch.cuda.is_available() else "cpu", "threads": torch.get_num_threads(),
                     "load_1min_start": load_1min()}
    rows = []
    for mix in args.mixes:
        print(f"{mix}:", flush=True)
        trainer = {"knowing": knowing_trainer, "adapt": adapt_trainer}[mix](args)
        r = paired(trainer, args.batches, args.repeats)
        del trainer
        gc.collect()
        rows.append([mix, r["tokens"], r["labelled_share"], r["trl_tokens_per_s"], r["label_only_tokens_per_s"],
                     r["ratio"], f"{r['loss_rel_diff_max']:.1e}", f"{r['grad_rel_diff_max']:.1e}"])
        key = "" if mix == "knowing" else f"_{mix}"
        results.update({f"{mix}_{k}": v for k, v in r.items() if k != "ratio"})
        results[f"ratio{key}"] = r["ratio"]
    if "ratio" not in results:  # only ADAPT-LLM's mix ran: it is the headline
        results["ratio"] = results["ratio_adapt"]
    results["load_1min_end"] = load_1min()
    print_table(["mix", "tokens", "labelled", "trl tok/s", "label-only tok/s", "ratio", "loss diff", "grad diff"],
                rows)
    print(f"load {results['load_1min_start']} -> {results['load_1min_end']}; forward + backward only (no optimizer "
          f"step), medians per micro-batch, {args.batches} micro-batches x {args.repeats}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
