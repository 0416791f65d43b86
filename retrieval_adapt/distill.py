"""Distil the re-ranker's candidate distribution into the dense retriever's query encoder (Iter-RetGen §3).

Only the query encoder trains; it starts as a copy of the passage encoder (loaded afresh from the index's
encoder name, so the passage encoder's files are never written). Passage vectors come from the index's stored
``embeddings.npy`` (memory-mapped, fixed), so the faiss index is never rebuilt: the adapted encoder shares the
embedding space and ``DenseRetriever.load(index_dir, query_encoder=OUT/query_encoder)`` uses it directly.

Outputs under ``output_dir``: ``query_encoder/`` (the checkpoint with the lowest validation loss),
``checkpoint/`` (accelerate state of the last save, for resuming), ``trainer_state.json``, ``metrics.jsonl``,
``config.yaml``. The entry script is ``training/distill_retriever.py``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from retrieval_adapt.distill_data import DistillBatch, load_distill_data, make_loader

logger = logging.getLogger(__name__)


@dataclass
class DistillConfig:
    # Data and index
    data_dir: str = field(default="runs/retrieval_adapt/world-data", metadata={"help": "data builder output"})
    index_dir: str = field(default="runs/index/world-minilm", metadata={"help": "the dense index (fixed)"})
    output_dir: str = "runs/retrieval_adapt/world-distill"
    query_input: Literal["question", "question_y1"] = "question"  # the retriever's input during adaptation
    # Optimisation (paper: batch 32, lr 1e-5, <= 1000 steps, keep the lowest validation loss)
    batch_size: int = 32
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    max_steps: int = 1000
    warmup_steps: int = 0
    lr_scheduler: Literal["constant", "linear"] = "constant"
    max_grad_norm: float = 1.0
    # Loss (tau is not published by the paper: see retrieval_adapt.losses.KLDistillationLoss)
    temperature: float = 0.05
    teacher_temperature: float = 1.0
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
    resume: bool = True  # continue from output_dir/checkpoint when it exists
    seed: int = 0
    report_to: Literal["none", "wandb"] = "none"
    wandb_project: str = "adaptive-rag-retrieval-adapt"

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_steps", "eval_steps", "logging_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.temperature <= 0 or self.teacher_temperature <= 0:
            raise ValueError("temperature and teacher_temperature must be positive")
        if not all(isinstance(a, str) for a in self.exclude_answers):
            raise ValueError(f"exclude_answers must be strings, got {self.exclude_answers!r}; YAML reads bare "
                             "yes/no/true/false as booleans: quote them, e.g. ['yes', 'no']")


def _loss_on(loss_fn, batch: DistillBatch, embeddings, device) -> tuple[torch.Tensor, dict[str, float]]:
    passages = embeddings(batch.positions.reshape(-1).tolist()).reshape(*batch.positions.shape, -1)  # (B, K, D)
    return loss_fn(batch.queries, passages.to(device), batch.teacher_scores.to(device), batch.mask.to(device))


@torch.no_grad()
def evaluate(loss_fn, loader, embeddings, accelerator) -> float:
    """Mean validation loss per question (batch losses weighted by batch size, summed over processes)."""
    loss_fn.query_encoder.eval()
    total = torch.zeros(2, device=accelerator.device)
    for batch in loader:
        loss, _ = _loss_on(loss_fn, batch, embeddings, accelerator.device)
        total += torch.tensor([float(loss) * len(batch.queries), len(batch.queries)], device=accelerator.device)
    total = accelerator.reduce(total, reduction="sum")
    loss_fn.query_encoder.train()
    return float(total[0] / total[1].clamp(min=1))


class TrainerState:
    """Step counter and best validation loss, saved beside the accelerate checkpoint."""

    def __init__(self, path: Path):
        self.path, self.step, self.best_val, self.best_step = path, 0, float("inf"), -1

    def load(self) -> None:
        d = json.loads(self.path.read_text())
        self.step, self.best_val, self.best_step = d["step"], d["best_val_loss"], d["best_step"]

    def save(self) -> None:
        self.path.write_text(json.dumps({"step": self.step, "best_val_loss": self.best_val,
                                         "best_step": self.best_step}, indent=2))


def _log(accelerator, out: Path, record: dict) -> None:
    if accelerator.is_main_process:
        with (out / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
    accelerator.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])


def _eval_and_keep_best(loss_fn, val_loader, embeddings, accelerator, state: TrainerState, out: Path) -> float:
    val = evaluate(loss_fn, val_loader, embeddings, accelerator)
    if val < state.best_val:
        state.best_val, state.best_step = val, state.step
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            accelerator.unwrap_model(loss_fn.query_encoder).save(out / "query_encoder")
    _log(accelerator, out, {"step": state.step, "val_loss": val, "best_val_loss": state.best_val})
    accelerator.print(f"step {state.step}: validation loss {val:.5f} (best {state.best_val:.5f} @ {state.best_step})")
    return val


def _setup(cfg: DistillConfig, accelerator):
    from transformers import get_scheduler

    from retrieval_adapt.losses import KLDistillationLoss

    data = load_distill_data(cfg.data_dir, cfg.index_dir, device=str(accelerator.device),
                             exclude_answers=cfg.exclude_answers)
    encoder = data.retriever.query_encoder  # a fresh copy of the passage encoder: the only trainable part
    encoder.train()
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    scheduler = get_scheduler(cfg.lr_scheduler, optimizer, num_warmup_steps=cfg.warmup_steps,
                              num_training_steps=cfg.max_steps)
    # The loss divides teacher scores by tau_t, so the prior enters scaled by tau_t / tau to end up as s0 / tau.
    prior = cfg.teacher_temperature / cfg.temperature if cfg.teacher_prior == "retriever" else 0.0
    train_loader = make_loader(data.train, cfg.batch_size, cfg.query_input, shuffle=True, prior_weight=prior)
    val_loader = make_loader(data.validation, cfg.batch_size, cfg.query_input, shuffle=False, prior_weight=prior)
    encoder, optimizer, train_loader, val_loader, scheduler = accelerator.prepare(
        encoder, optimizer, train_loader, val_loader, scheduler)
    loss_fn = KLDistillationLoss(encoder, temperature=cfg.temperature, teacher_temperature=cfg.teacher_temperature)
    return data, loss_fn, optimizer, scheduler, train_loader, val_loader


def train(cfg: DistillConfig, accelerator=None) -> dict:
    """Run (or resume) distillation; returns the best validation loss and its step."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, set_seed
    from tqdm.auto import tqdm

    from inference.config import config_dict, save_config

    # A seedable sampler makes epoch e's order a function of (seed, e): a resumed run skips exactly the batches
    # the interrupted one had done.
    accelerator = accelerator or Accelerator(log_with="wandb" if cfg.report_to == "wandb" else None,
                                             dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    set_seed(cfg.seed)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if accelerator.is_main_process:
        save_config(out / "config.yaml", cfg)
    data, loss_fn, optimizer, scheduler, train_loader, val_loader = _setup(cfg, accelerator)
    embeddings = data.retriever.passage_embeddings
    if cfg.report_to == "wandb":
        accelerator.init_trackers(cfg.wandb_project, config=config_dict(cfg))
    state = TrainerState(out / "trainer_state.json")
    if cfg.resume and (out / "checkpoint").is_dir() and state.path.is_file():
        accelerator.load_state(str(out / "checkpoint"))
        state.load()
        accelerator.print(f"resumed from {out / 'checkpoint'} at step {state.step}")
    if state.step == 0:  # the unadapted encoder is the first candidate for "best": adaptation can only help
        _eval_and_keep_best(loss_fn, val_loader, embeddings, accelerator, state, out)
    epoch, skip = divmod(state.step, len(train_loader))
    bar = tqdm(total=cfg.max_steps, initial=state.step, desc="distilling", disable=not accelerator.is_main_process)
    params = [p for p in loss_fn.query_encoder.parameters() if p.requires_grad]
    while state.step < cfg.max_steps:
        train_loader.set_epoch(epoch)
        for batch in accelerator.skip_first_batches(train_loader, skip) if skip else train_loader:
            loss, stats = _loss_on(loss_fn, batch, embeddings, accelerator.device)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(params, cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            state.step += 1
            bar.update(1)
            if state.step % cfg.logging_steps == 0:
                _log(accelerator, out, {"step": state.step, "lr": scheduler.get_last_lr()[0], **stats})
            if state.step % cfg.eval_steps == 0 or state.step == cfg.max_steps:
                _eval_and_keep_best(loss_fn, val_loader, embeddings, accelerator, state, out)
                accelerator.save_state(str(out / "checkpoint"))
                if accelerator.is_main_process:
                    state.save()
            if state.step >= cfg.max_steps:
                break
        epoch, skip = epoch + 1, 0
    bar.close()
    accelerator.end_training()
    return {"best_val_loss": state.best_val, "best_step": state.best_step, "steps": state.step}
