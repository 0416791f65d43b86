"""Configuration of the ADAPT-LLM job: fine-tuning (:class:`AdaptTrainConfig`) and the held-out evaluation
that follows it (:class:`AdaptEvalConfig`). Algorithm 1's settings are
:class:`data_builders.adapt_llm.AdaptDataConfig`, the model both start from
:class:`adaptive_rag.lm.base_model.BaseModelConfig`. Field names are unique across the four, so one YAML holds
them all; defaults are the paper's recipe (ADAPT-LLM's ``train.py`` on alpaca-lora).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from adaptive_rag.plumbing.cards import check_repo_id
from adaptive_rag.plumbing.question_set import QuestionSet

RetTokenTraining = Literal["trainable_tokens", "modules_to_save"]
RetToken = Literal["special", "text"]
KeepAdapter = Literal["last", "best"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]


@dataclass
class AdaptTrainConfig:
    output_dir: str = "runs/adapt_llm/model"
    # Batch: effective = micro-batch x gradient accumulation x processes; accumulation is derived from these.
    micro_batch_size: int = 32
    effective_batch_size: int = 128
    num_train_epochs: float = field(default=3.0, metadata={"aliases": ["--num_epochs"]})
    learning_rate: float = 3e-4
    warmup_steps: float = 100  # alpaca-lora's default; a float in (0, 1) is a share of all steps
    lr_scheduler_type: str = "linear"
    max_length: int = 512  # alpaca-lora's cutoff_len as ADAPT-LLM set it
    group_by_length: bool = True  # the authors' flag: batches of similar length, less padding
    # trl's padding-free batching: each micro-batch flattened into one row, no pad tokens; the same loss and
    # gradients (bench/sft.py). Off here (the paper's recipe: group_by_length leaves little padding, and on a GPU at
    # SmolLM2's size it made no difference: x0.95-1.06 on an H200); on in the CPU recipes, whose random batches it
    # trains x1.6 faster with training/varlen_attention.py's sdpa_varlen (x1.2-1.3 with SDPA). Instances are cut at
    # max_length when tokenized either way.
    padding_free: bool = False
    # LoRA (alpaca-lora / ADAPT-LLM)
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    # What <RET> is. special: one added token whose embedding (and, untied, LM-head) rows train (the paper's
    # wording). text: plain text the tokenizer splits into ordinary pieces, nothing added, LoRA alone learns it
    # (the authors' finetune.py); the gate detects it as a substring and thresholds its first piece's probability.
    ret_token: RetToken = "special"
    # How the new <RET> row is trained (ret_token special). trainable_tokens: only that row of the (tied)
    # embedding/LM head, a few KB in the adapter. modules_to_save: whole embedding and LM head matrices (heavier;
    # use it under FSDP/ZeRO, which peft's trainable tokens do not support).
    ret_token_training: RetTokenTraining = "trainable_tokens"
    # Learning rate of the <RET> row (trainable_tokens only); null = learning_rate. A new row starts ~15 logits
    # below the top token, which Adam steps of 3e-4 close only after hundreds of steps: short runs need more.
    ret_token_learning_rate: float | None = None
    # Model loading
    precision: Precision = "auto"  # auto: bf16 on a CUDA GPU that supports it, else fp32
    load_in_4bit: bool = False  # QLoRA (bitsandbytes, CUDA only)
    load_in_8bit: bool = False  # alpaca-lora's 8-bit base (CUDA only)
    gradient_checkpointing: bool = False
    # Bookkeeping
    logging_steps: int = 10
    eval_steps: int | None = 200  # validation loss every this many steps; null = never
    save_steps: int = 200
    # Which adapter output_dir ends with. last: the last step's. best: the checkpoint with the lowest validation loss
    # (the authors: load_best_model_at_end with eval and save every 200 steps); needs a validation split, eval_steps,
    # and save_steps a multiple of eval_steps. train_results.json records the step kept and why ("kept").
    keep_adapter: KeepAdapter = "last"
    save_total_limit: int = 3
    resume_from_checkpoint: str = "auto"  # auto: the last checkpoint in output_dir; "never"; or a folder
    report_to: str = "none"  # "wandb" to log there (offline unless an API key is configured); never prompts
    run_name: str | None = None
    merge_adapter: bool = False  # also write output_dir/merged: base + adapter as one model
    seed: int = field(default=42, metadata={"aliases": ["--train_seed"]})
    max_steps: int = -1  # > 0 stops after this many optimizer steps (smoke tests)
    push_to_hub: str | None = None  # Hub model repo ORG/NAME: upload the adapter (with its card) after training

    def __post_init__(self) -> None:
        positive = ("micro_batch_size", "effective_batch_size", "learning_rate", "max_length", "lora_r",
                    "lora_alpha", "logging_steps", "save_steps", "save_total_limit")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.num_train_epochs <= 0 and self.max_steps <= 0:
            raise ValueError("num_train_epochs must be > 0 (or set max_steps)")
        if self.effective_batch_size < self.micro_batch_size:
            raise ValueError(f"effective_batch_size ({self.effective_batch_size}) must be >= micro_batch_size "
                             f"({self.micro_batch_size})")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.load_in_4bit and self.load_in_8bit:
            raise ValueError("choose one of load_in_4bit and load_in_8bit")
        if not self.lora_target_modules:
            raise ValueError("lora_target_modules must name at least one module (e.g. q_proj v_proj)")
        if self.ret_token_training not in ("trainable_tokens", "modules_to_save"):
            raise ValueError(f"ret_token_training must be trainable_tokens or modules_to_save, "
                             f"got '{self.ret_token_training}'")
        if self.ret_token_learning_rate is not None and self.ret_token_learning_rate <= 0:
            raise ValueError(f"ret_token_learning_rate must be > 0 or null, got {self.ret_token_learning_rate}")
        if self.eval_steps is not None and self.eval_steps <= 0:
            raise ValueError(f"eval_steps must be > 0 or null, got {self.eval_steps}")
        if self.ret_token not in ("special", "text"):
            raise ValueError(f"ret_token must be special or text, got '{self.ret_token}'")
        if self.keep_adapter not in ("last", "best"):
            raise ValueError(f"keep_adapter must be last or best, got '{self.keep_adapter}'")
        if self.keep_adapter == "best" and (self.eval_steps is None or self.save_steps % self.eval_steps):
            raise ValueError(f"keep_adapter best compares the validation loss of saved checkpoints: set eval_steps "
                             f"and make save_steps a multiple of it (got eval_steps {self.eval_steps}, save_steps "
                             f"{self.save_steps})")
        if self.push_to_hub is not None:

            check_repo_id(self.push_to_hub)


@dataclass
class AdaptEvalConfig:
    """After training: NR vs AR vs ADAPT-LLM on questions never used in training (the world's held-out part)."""

    evaluate: bool = True
    # The evaluation's questions (a QuestionSet): the world's held-out part (needs dataset world-adapt-train) or a
    # QA file (read_qa)
    eval_dataset: str = "world-adapt-heldout"
    eval_dataset_format: str | None = None
    eval_split: str | None = None  # a hub dataset's split (eval_dataset_format hf)
    eval_start: int = 0
    eval_limit: int | None = None
    eval_shuffle_seed: int | None = None  # null: the set's order
    eval_index: str = "world"  # "world": BM25 over the world's passages; else an index folder (load_retriever)
    top_k: int = 1  # passages in the context prompt (training showed one gold passage)
    eval_batch_size: int = 16
    eval_max_new_tokens: int = 20  # the authors' evaluation
    gate_rule: Literal["token", "threshold"] = "token"
    ret_threshold: float = 0.5
    # the context prompt's passage: retrieved from eval_index (title and text), or the one each question's file ships
    # (the authors' PopQA file: its precomputed Contriever passage; needs a reader that keeps it)
    eval_context_source: Literal["retrieve", "file"] = "retrieve"
    sweep_thresholds: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9])

    RENAMED: ClassVar[dict[str, str]] = {
        "eval_source": "eval_dataset (world_heldout is now world-adapt-heldout)", "eval_format": "eval_dataset_format",
        "eval_k": "top_k (passages in the context prompt)"}

    def __post_init__(self) -> None:
        QuestionSet.of(self, prefix="eval_")  # an old name, a bad slice: one line now
        if self.top_k < 1 or self.eval_batch_size < 1 or self.eval_max_new_tokens < 1:
            raise ValueError("top_k, eval_batch_size and eval_max_new_tokens must be >= 1")
        if not all(0.0 <= t <= 1.0 for t in self.sweep_thresholds):
            raise ValueError(f"sweep_thresholds must lie in [0, 1], got {self.sweep_thresholds}")
