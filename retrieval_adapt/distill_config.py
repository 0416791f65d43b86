"""The distillation job's settings: :mod:`retrieval_adapt.distill` runs them and its card
(:mod:`retrieval_adapt.distill_card`) reports them, so they live apart and neither of the two imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from adaptive_rag.plumbing.cards import check_repo_id


@dataclass
class DistillConfig:
    # Data and index
    data_dir: str = field(default="runs/retrieval_adapt/world-data", metadata={"help": "data builder output"})
    index: str = field(default="runs/index/world-minilm", metadata={"help": "the dense index (fixed)",
                                                                    "aliases": ["--index_dir"]})
    output_dir: str = "runs/retrieval_adapt/world-distill"
    query_input: Literal["question", "question_y1"] = "question"  # the retriever's input during adaptation
    # Optimisation (paper: batch 32, lr 1e-5, <= 1000 steps, keep the lowest validation loss)
    batch_size: int = 32
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    max_steps: int = 1000
    warmup_steps: int = 0
    lr_scheduler_type: Literal["constant", "linear"] = field(default="constant",
                                                              metadata={"aliases": ["--lr_scheduler"]})
    max_grad_norm: float = 1.0
    # Loss (tau is not published by the paper: see retrieval_adapt.losses.KLDistillationLoss)
    temperature: float = 0.05
    # How the teacher's scores become P_rr. eq3: the paper's Eq. 3, P_rr ∝ exp(s/τ) with s the re-ranker's relevance
    # probability (exp of a log-probability score, sigmoid of a one-logit cross-encoder's logit) and τ the student's
    # own temperature (teacher_temperature is not read). softmax: softmax(score / teacher_temperature) over the raw
    # log-domain scores, this project's earlier teacher: the one to use with an answer-likelihood teacher, whose
    # probabilities P(answer | p) lie far below τ, so that Eq. 3 would make them all but uniform.
    teacher_distribution: Literal["eq3", "softmax"] = "eq3"
    teacher_temperature: float = 1.0  # teacher_distribution softmax only
    # "uniform": P_rr = softmax(t / tau_t), the paper's (and REPLUG's) teacher. "retriever": multiply in the
    # initial retriever's own distribution, P_rr ∝ exp(t / tau_t + s0 / tau), i.e. the posterior P(p | q, a) with
    # the retriever as prior when t = log P(a | p): an answer-likelihood teacher alone gives no credit to a
    # multi-hop question's bridge paragraph (it names the entity, not the answer), and the student unlearns it.
    teacher_prior: Literal["uniform", "retriever"] = "uniform"
    # Questions whose every gold answer is one of these (after SQuAD normalisation) are left out of both splits.
    # An answer-likelihood teacher cannot rank paragraphs for them: P("yes" | p, q, y1) does not depend on whether
    # p holds the evidence. On HotpotQA's yes/no questions it put a gold paragraph first for 6% of questions,
    # the retriever for 94% (data_hotpotqa.yaml, 48 of 400 questions): distilling them teaches noise.
    exclude_answers: list[str] = field(default_factory=list)
    # Bookkeeping
    eval_steps: int = 50
    logging_steps: int = 10
    resume: bool = True  # continue from the newest complete output_dir/checkpoint-N; false: start over in place
    save_total_limit: int = 2  # complete checkpoints kept (the newest, and one to fall back on if it is damaged)
    seed: int = 0
    report_to: Literal["none", "wandb"] = "none"
    wandb_project: str = "adaptive-rag-retrieval-adapt"
    # A Hub repo id (ORG/NAME): upload output_dir/query_encoder (with its card) there when the run completes.
    # Needs network and a login; offline, the run still succeeds locally and the error line says how to push later.
    push_to_hub: str | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_steps", "eval_steps", "logging_steps", "save_total_limit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.temperature <= 0 or self.teacher_temperature <= 0:
            raise ValueError("temperature and teacher_temperature must be positive")
        if not all(isinstance(a, str) for a in self.exclude_answers):
            raise ValueError(f"exclude_answers must be strings, got {self.exclude_answers!r}; YAML reads bare "
                             "yes/no/true/false as booleans: quote them, e.g. ['yes', 'no']")
        if self.push_to_hub is not None:
            check_repo_id(self.push_to_hub)
