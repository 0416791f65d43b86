"""Configuration of the GRPO job (``training/grpo.py``): what the policy decides and how it is rewarded
(:class:`GrpoTaskConfig`), and how it trains (:class:`GrpoTrainConfig`). The model it starts from is
:class:`adaptive_rag.lm.base_model.BaseModelConfig` (``base_model``), optionally with an ADAPT-LLM adapter on top
(``init_adapter``: supervised, then RL). Field names are unique across the three, so one YAML holds them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from adaptive_rag.plumbing.cards import check_repo_id
from adaptive_rag.plumbing.question_set import QuestionSet
from adaptive_rag.plumbing.wandb_logging import check_report_to

Task = Literal["gate", "search"]
RetrieverKind = Literal["index", "random"]
Finetune = Literal["lora", "full"]
RetToken = Literal["special", "text"]


@dataclass
class GrpoTaskConfig:
    # gate: one decision (an answer, or <RET> -> retrieve with the question -> the context prompt answers);
    # search: Search-R1's turns (<search>q</search> -> <information> ... </information>, then <answer>)
    task: Task = "gate"
    # The training questions (a QuestionSet): a world set, a knowing set (its tuning half) or a QA file
    dataset: str = "world-adapt-train"
    dataset_format: str | None = None
    split: str | None = None
    start: int = 0
    limit: int | None = None
    shuffle_seed: int | None = 0
    world_seed: int = 0
    index: str | None = None  # an index folder; null: BM25 over the embedded (or knowing) world's passages
    # index: the index answers the query; random: a control whose passages are unrelated to the question (the index's
    # hits for another training question, drawn with retriever_seed): a policy that learns must stop retrieving
    retriever: RetrieverKind = "index"
    retriever_seed: int = 0
    top_k: int = 1  # passages per retrieval (the gate's context prompt: ADAPT-LLM trains with one)
    # Reward = correct (judge) - retrieval_penalty x retrievals + format_reward x well_formed
    retrieval_penalty: float = 0.1  # λ
    format_reward: float = 0.1
    judge: Literal["contains", "exact_match"] = "contains"  # the gate's judge (any gold answer contained)
    judge_normalize: bool = True
    # gate: ADAPT-LLM's prompts (data_builders/adapt_llm_prompts.py) and how <RET> is written
    prompt_variant: Literal["paper", "reference"] = "paper"
    ret_token: RetToken = "special"
    max_passage_words: int | None = 40
    answer_max_new_tokens: int = 16  # the context prompt's answer after <RET> (greedy: the environment's step)
    # <RET> is never the context prompt's answer: that answer is the environment's step, which the loss never sees, so
    # nothing else keeps the <RET> that RL raises on the parametric prompt out of it (docs/knowing_world.md)
    context_ban_ret: bool = False
    # A share of each group whose first token is set to <RET> (the rest sampled): a policy that never writes <RET>
    # (a base model) gets retrieval outcomes to compare; 0 = purely on-policy (use it from an ADAPT-LLM adapter).
    # search: the first turn of those rows opens with <search>, and the policy writes the query</search> itself
    explore_ret: float = 0.0
    # search: turns
    max_searches: int = 2
    turn_max_new_tokens: int = 32
    search_chat: bool = True  # Search-R1's prompt as the chat template's user turn

    RENAMED = {"lambda": "retrieval_penalty", "lam": "retrieval_penalty"}

    def __post_init__(self) -> None:
        QuestionSet.of(self)
        if self.top_k < 1 or self.answer_max_new_tokens < 1 or self.turn_max_new_tokens < 1:
            raise ValueError("top_k, answer_max_new_tokens and turn_max_new_tokens must be >= 1")
        if self.retrieval_penalty < 0 or self.format_reward < 0:
            raise ValueError(f"retrieval_penalty and format_reward must be >= 0, got {self.retrieval_penalty} and "
                             f"{self.format_reward}")
        if not 0.0 <= self.explore_ret < 1.0:
            raise ValueError(f"explore_ret must be in [0, 1), got {self.explore_ret}")
        if self.max_searches < 0:
            raise ValueError(f"max_searches must be >= 0, got {self.max_searches}")
        if self.context_ban_ret and self.ret_token != "special":
            raise ValueError("context_ban_ret needs ret_token: special (a <RET> written as text pieces has no one id "
                             "to ban)")
        for name, allowed in (("task", ("gate", "search")), ("retriever", ("index", "random")),
                              ("ret_token", ("special", "text"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got '{getattr(self, name)}'")

    def question_set(self) -> QuestionSet:
        return QuestionSet.of(self)


@dataclass
class GrpoTrainConfig:
    output_dir: str = "runs/grpo/gate"
    # ADAPT-LLM adapter folder to continue (supervised, then RL): its LoRA trains on, its <RET> is the policy's
    init_adapter: str | None = None
    finetune: Finetune = "lora"
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0  # dropout would make the rollout's and the loss's policies differ
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    # GRPO (trl's GRPOConfig names where they exist)
    num_generations: int = 4  # group size G: completions per question, compared with each other
    questions_per_step: int = 8  # questions per optimizer step (each G times)
    # completions per forward/backward pass (gradient accumulation over the step's questions x G); null: all at once
    micro_batch_size: int | None = None
    max_steps: int = 60
    learning_rate: float = 1e-4
    ret_token_learning_rate: float | None = 1e-3  # the new <RET> row (special, LoRA); null: learning_rate
    beta: float = 0.0  # KL coefficient against the starting policy (trl's default 0: no reference model)
    epsilon: float = 0.2  # PPO clip
    temperature: float = 1.0
    max_new_tokens: int = 16  # the gate's decision turn (answer or <RET>)
    loss_type: str = "dapo"  # trl's: grpo, dr_grpo, dapo, bnpo
    scale_rewards: str = "group"  # trl's: group, batch, none
    precision: Literal["auto", "fp32", "bf16"] = "fp32"
    rollout_batch_size: int = 32  # rows decoding together in the rollout
    # vLLM generation (GPU recipes: trl generates, the rollout's decoding then runs on the trainer's model)
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    # Bookkeeping
    logging_steps: int = 1
    save_steps: int = 10
    save_total_limit: int = 2
    resume_from_checkpoint: str = "auto"  # auto: output_dir's last checkpoint; "never"; or a folder
    report_to: str = "none"  # wandb: logged there (offline without an API key)
    run_name: str | None = None
    seed: int = 42
    log_completions: bool = False
    push_to_hub: str | None = None

    def __post_init__(self) -> None:
        for name in ("num_generations", "questions_per_step", "max_steps", "learning_rate", "max_new_tokens",
                     "lora_r", "lora_alpha", "logging_steps", "save_steps", "save_total_limit", "rollout_batch_size",
                     "temperature"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 (GRPO compares completions within a group), got "
                             f"{self.num_generations}")
        completions = self.questions_per_step * self.num_generations
        if self.micro_batch_size is not None and (self.micro_batch_size <= 0 or completions % self.micro_batch_size):
            raise ValueError(f"micro_batch_size must divide questions_per_step x num_generations ({completions}), got "
                             f"{self.micro_batch_size}")
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        if self.finetune not in ("lora", "full"):
            raise ValueError(f"finetune must be lora or full, got '{self.finetune}'")
        if self.finetune == "full" and self.init_adapter:
            raise ValueError("init_adapter continues a LoRA adapter: use finetune lora with it")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.ret_token_learning_rate is not None and self.ret_token_learning_rate <= 0:
            raise ValueError(f"ret_token_learning_rate must be > 0 or null, got {self.ret_token_learning_rate}")
        check_report_to(self.report_to)
        if self.push_to_hub is not None:
            check_repo_id(self.push_to_hub)
