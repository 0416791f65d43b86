"""Distil the re-ranker's candidate distribution into the dense retriever's query encoder (Iter-RetGen §3).

Only the query encoder trains; it starts as a copy of the passage encoder (loaded afresh from the index's
encoder name, so the passage encoder's files are never written). Passage vectors come from the index's stored
``embeddings.npy`` (memory-mapped, fixed), so the faiss index is never rebuilt: the adapted encoder shares the
embedding space and ``DenseRetriever.load(index_dir, query_encoder=OUT/query_encoder)`` uses it directly.

Outputs under ``output_dir``: ``query_encoder/`` (the encoder with the lowest validation loss), ``checkpoint-N/``
(accelerate state after step N, for resuming; each written whole, the newest ``save_total_limit`` kept),
``trainer_state.json``, ``metrics.jsonl``, ``config.yaml``; what survives a kill is described in
:mod:`retrieval_adapt.distill_checkpoints`. A checkpoint is saved at every evaluation, and on Ctrl-C (or SIGTERM)
after the step in flight, so an interrupted run loses at most that step; a hard kill loses at most ``eval_steps``.
``query_encoder/README.md`` is the encoder's card (:mod:`retrieval_adapt.distill_card`), rewritten whenever the
encoder is; with ``push_to_hub: ORG/NAME`` a completed run uploads ``query_encoder/`` to that Hub repo.
The entry script is ``training/distill_retriever.py``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from pathlib import Path

import torch

from adaptive_rag.lm.models import hub_offline
from adaptive_rag.plumbing.cards import push_to_hub
from adaptive_rag.plumbing.config import config_dict, save_config
from adaptive_rag.plumbing.progress import bar_options, library_bars_quiet
from adaptive_rag.plumbing.record_log import FolderLock, check_same_settings
from retrieval_adapt import distill_checkpoints as ckpt
from retrieval_adapt.distill_card import write_encoder_card_of
from retrieval_adapt.distill_checkpoints import GracefulStop, MetricsLog, TrainerState
from retrieval_adapt.distill_config import DistillConfig
from retrieval_adapt.distill_data import DistillBatch, load_distill_data, make_loader
from retrieval_adapt.losses import KLDistillationLoss

logger = logging.getLogger(__name__)

# Settings a resumed run may change: they do not change what the steps already done computed.
RUNTIME_FIELDS = ("max_steps", "eval_steps", "logging_steps", "save_total_limit", "resume", "report_to",
                  "wandb_project", "output_dir", "push_to_hub")


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


def _log(accelerator, metrics: MetricsLog, record: dict) -> None:
    if accelerator.is_main_process:
        metrics.append(record)
    accelerator.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])


def _eval_and_keep_best(loss_fn, val_loader, embeddings, accelerator, state: TrainerState, out: Path,
                        metrics: MetricsLog, write_card) -> float:
    val = evaluate(loss_fn, val_loader, embeddings, accelerator)
    improved = val < state.best_val_loss
    if improved:
        state.best_val_loss, state.best_step = val, state.step
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            with library_bars_quiet():  # no "Writing model shards" bar per improvement in a log file
                ckpt.save_best(accelerator.unwrap_model(loss_fn.query_encoder), out, state.step, val)
    _log(accelerator, metrics, {"step": state.step, "val_loss": val, "best_val_loss": state.best_val_loss})
    if improved and accelerator.is_main_process:
        write_card(state)
    accelerator.print(f"step {state.step}: validation loss {val:.5f} "
                      f"(best {state.best_val_loss:.5f} @ {state.best_step})")
    return val


def _setup(cfg: DistillConfig, accelerator):
    from transformers import get_scheduler

    data = load_distill_data(cfg.data_dir, cfg.index, device=str(accelerator.device),
                             exclude_answers=cfg.exclude_answers)
    encoder = data.retriever.query_encoder  # a fresh copy of the passage encoder: the only trainable part
    encoder.train()
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    scheduler = get_scheduler(cfg.lr_scheduler_type, optimizer, num_warmup_steps=cfg.warmup_steps,
                              num_training_steps=cfg.max_steps)
    # Eq. 3: P_rr ∝ exp(s / tau) with s the relevance probability and tau the student's own temperature.
    eq3 = cfg.teacher_distribution == "eq3"
    teacher_tau = cfg.temperature if eq3 else cfg.teacher_temperature
    probability = data.score_kind if eq3 else None
    # The loss divides teacher scores by tau_t, so the prior enters scaled by tau_t / tau to end up as s0 / tau.
    prior = teacher_tau / cfg.temperature if cfg.teacher_prior == "retriever" else 0.0
    train_loader = make_loader(data.train, cfg.batch_size, cfg.query_input, shuffle=True, prior_weight=prior,
                               probability=probability)
    val_loader = make_loader(data.validation, cfg.batch_size, cfg.query_input, shuffle=False, prior_weight=prior,
                             probability=probability)
    encoder, optimizer, train_loader, val_loader, scheduler = accelerator.prepare(
        encoder, optimizer, train_loader, val_loader, scheduler)
    loss_fn = KLDistillationLoss(encoder, temperature=cfg.temperature, teacher_temperature=teacher_tau)
    return data, loss_fn, optimizer, scheduler, train_loader, val_loader


def _resume(cfg: DistillConfig, accelerator, out: Path, metrics: MetricsLog) -> TrainerState:
    """The state to continue from: the newest complete checkpoint (loaded into ``accelerator``), or a fresh one."""
    found = ckpt.latest_checkpoint(out) if cfg.resume else None
    if found is None:
        if accelerator.is_main_process:
            ckpt.start_over(out)
        accelerator.wait_for_everyone()
        return TrainerState()
    folder, state = found
    accelerator.load_state(str(folder))
    # query_encoder/ is replaced just before the checkpoint of its step is written: a kill in between leaves an
    # encoder newer than the checkpoint. It is a real, measured model, so "best" is what that folder holds.
    best = ckpt.read_best(out)
    state.best_val_loss, state.best_step = best if best else (math.inf, -1)
    if accelerator.is_main_process:
        metrics.keep_until(state.step)
    accelerator.print(f"resumed from {folder} at step {state.step}")
    return state


def check_inputs(cfg: DistillConfig) -> None:
    """The data and the index exist, checked before output_dir is created: a mistake leaves no folder (a
    config.yaml written first would make a later, correct run look like a resume of other settings)."""
    if not (Path(cfg.data_dir) / "dataset").is_dir():
        raise FileNotFoundError(f"--data_dir {cfg.data_dir}: no dataset/ folder in it; build it with "
                                "`python -m training.distill_set`")
    if not (Path(cfg.index) / "meta.json").is_file():
        raise FileNotFoundError(f"--index {cfg.index}: not an index folder (no meta.json); build one with "
                                "`python -m retrieval_adapt.build_index --kind dense`")
    out = Path(cfg.output_dir)
    if out.exists() and not out.is_dir():
        raise FileNotFoundError(f"--output_dir {cfg.output_dir} is a file, not a folder")


def train(cfg: DistillConfig, accelerator=None) -> dict:
    """Run (or resume) distillation; returns the whole run's best validation loss and its step (a resumed run
    included: the state comes from the checkpoint). The output folder is locked for the run."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    # A seedable sampler makes epoch e's order a function of (seed, e): a resumed run skips exactly the batches
    # the interrupted one had done.
    accelerator = accelerator or Accelerator(log_with="wandb" if cfg.report_to == "wandb" else None,
                                             dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    out = Path(cfg.output_dir)
    check_inputs(cfg)
    if cfg.push_to_hub and hub_offline():
        logger.warning("push_to_hub %s is set but HF_HUB_OFFLINE=1: the run trains and saves locally, and the push "
                       "at the end will fail", cfg.push_to_hub)
    with FolderLock(out) if accelerator.is_main_process else contextlib.nullcontext():
        result = _train(cfg, accelerator, out)
    if cfg.push_to_hub and accelerator.is_main_process:
        result["pushed_to"] = push_to_hub(out / "query_encoder", cfg.push_to_hub, repo_type="model")
    return result


def _train(cfg: DistillConfig, accelerator, out: Path) -> dict:
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm

    set_seed(cfg.seed)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.resume and ckpt.checkpoints(out):  # only a run with steps to continue binds the settings
        check_same_settings(out / "config.yaml", config_dict(cfg), RUNTIME_FIELDS, "a distillation run")
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        save_config(out / "config.yaml", cfg)
    data, loss_fn, optimizer, scheduler, train_loader, val_loader = _setup(cfg, accelerator)
    embeddings = data.retriever.passage_embeddings

    def write_card(at: TrainerState) -> None:
        write_encoder_card_of(cfg, out, at, data.retriever.passage_encoder_name, accelerator.num_processes)

    if cfg.report_to == "wandb":
        accelerator.init_trackers(cfg.wandb_project, config=config_dict(cfg))
    metrics = MetricsLog(out / "metrics.jsonl")
    state = _resume(cfg, accelerator, out, metrics)
    resumed_from = saved_step = state.step
    if state.step == 0:  # the unadapted encoder is the first candidate for "best": adaptation can only help
        _eval_and_keep_best(loss_fn, val_loader, embeddings, accelerator, state, out, metrics, write_card)
    epoch, skip = divmod(state.step, len(train_loader))
    bar = tqdm(total=cfg.max_steps, initial=state.step, desc="distilling",
               **bar_options(disable=not accelerator.is_main_process))
    params = [p for p in loss_fn.query_encoder.parameters() if p.requires_grad]
    started = time.perf_counter()

    def checkpoint() -> None:
        nonlocal saved_step, started
        now = time.perf_counter()
        state.train_seconds, started = state.train_seconds + now - started, now
        ckpt.save_checkpoint(accelerator, out, state, cfg.save_total_limit)
        saved_step = state.step

    try:
        with GracefulStop() as stop:
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
                        _log(accelerator, metrics, {"step": state.step, "lr": scheduler.get_last_lr()[0], **stats})
                    if state.step % cfg.eval_steps == 0 or state.step == cfg.max_steps:
                        _eval_and_keep_best(loss_fn, val_loader, embeddings, accelerator, state, out, metrics,
                                            write_card)
                        checkpoint()
                    if _stop_requested(stop, accelerator):  # Ctrl-C: keep this step, then stop
                        if saved_step != state.step:
                            checkpoint()
                        raise KeyboardInterrupt(f"stopped at step {state.step}, saved in {out}/checkpoint-"
                                                f"{state.step}: rerun the same command to resume")
                    if state.step >= cfg.max_steps:
                        break
                epoch, skip = epoch + 1, 0
    finally:
        bar.close()
        accelerator.end_training()
    if accelerator.is_main_process and (out / "query_encoder").is_dir():
        write_card(state)  # the whole run's figures (steps, time), also when the best step came earlier
    return {"best_val_loss": state.best_val_loss, "best_step": state.best_step, "steps": state.step,
            "resumed_from_step": resumed_from, "train_seconds": round(state.train_seconds, 1)}


def _stop_requested(stop: GracefulStop, accelerator) -> bool:
    """Whether any process was asked to stop: all of them stop after the same step (one small all-reduce)."""
    if accelerator.num_processes == 1:
        return stop.requested
    flag = torch.tensor([float(stop.requested)], device=accelerator.device)
    return bool(accelerator.reduce(flag, reduction="sum").item() > 0)
