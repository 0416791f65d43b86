"""wandb for every job, off by default and never prompting.

``report_to: wandb`` logs there; without an API key (``WANDB_API_KEY`` or a ``~/.netrc`` entry) the run is
written offline (``wandb sync`` later), so no job ever stops at a login prompt. Training hands ``report_to`` to
the Trainer; evaluation and the data builders call :func:`log_run` once at the end with their resolved config,
their metrics or stats, and (evaluation) a predictions table.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

REPORT_TO = ("none", "wandb")
# Columns of the predictions table: enough to read a run's answers beside their retrievals.
TABLE_COLUMNS = ("id", "question", "gold", "output", "answer", "retrievals", "queries")


def check_report_to(value: str) -> None:
    if value not in REPORT_TO:
        raise ValueError(f"report_to must be one of {', '.join(REPORT_TO)}, got '{value}'")


def configure_wandb(report_to: str) -> None:
    """wandb only when asked, and never an interactive login prompt: offline unless a key is configured."""
    if "wandb" not in report_to:
        return
    netrc = Path.home() / ".netrc"
    has_key = bool(os.environ.get("WANDB_API_KEY")) or (netrc.is_file() and "api.wandb.ai" in netrc.read_text())
    if not has_key:
        os.environ.setdefault("WANDB_MODE", "offline")
        logger.info("wandb: no API key configured, logging offline (wandb sync later)")


def predictions_rows(records: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """One row per prediction record, in :data:`TABLE_COLUMNS` order."""
    rows = []
    for r in records:
        retrievals = r.get("retrievals") or []
        rows.append([str(r.get("id")), r.get("question", ""), " | ".join(map(str, r.get("answers") or [])),
                     r.get("output") or "", r.get("answer") or "", len(retrievals),
                     " || ".join(str(x.get("query", "")) for x in retrievals)])
    return rows


def log_run(report_to: str, *, job: str, name: str | None, config: Mapping[str, Any],
            metrics: Mapping[str, Any], records: Sequence[Mapping[str, Any]] = (), folder: str | Path | None = None,
            ) -> str | None:
    """Log one finished job to wandb when ``report_to`` asks for it; returns the run's local folder (None when
    off). Only numbers go to the summary; the predictions become a ``wandb.Table``."""
    if report_to != "wandb":
        return None
    configure_wandb(report_to)
    import wandb

    run = wandb.init(project=os.environ.get("WANDB_PROJECT", "adaptive-rag"), job_type=job, name=name,
                     config=dict(config), dir=str(folder) if folder else None, reinit="finish_previous")
    try:
        run.summary.update({k: v for k, v in metrics.items() if isinstance(v, (int, float)) and
                            not isinstance(v, bool)})
        if records:
            run.log({"predictions": wandb.Table(columns=list(TABLE_COLUMNS), data=predictions_rows(records))})
        return run.dir
    finally:
        run.finish()
