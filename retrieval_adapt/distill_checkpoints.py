"""What a distillation run keeps on disk, written so that a kill at any moment leaves a folder it can resume from.

Under ``output_dir``:

* ``checkpoint-N/``: the accelerate state after step N (weights, optimizer, scheduler, RNG) and ``trainer_state.json``
  (step, best validation loss, a manifest of the files with their sizes). Written as ``checkpoint-N.tmp`` and
  renamed when complete, so a folder without ``.tmp`` is whole; a resume takes the newest one whose manifest
  checks out and warns about (and skips) any other.
* ``query_encoder/``: the best encoder so far, with ``best.json`` (its step and validation loss), replaced whole.
* ``metrics.jsonl``: one line per logged step and one per evaluation; a resume drops the lines of the steps after its
  checkpoint, which the resumed run does again, so every step is logged once.
* ``trainer_state.json``: the newest checkpoint's state, for people and scripts (a resume reads the checkpoint's own).
"""

from __future__ import annotations

import json
import logging
import math
import re
import signal
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from adaptive_rag.plumbing.atomic_files import atomic_folder, commit, remove, tmp_path, write_text_atomic
from adaptive_rag.plumbing.record_log import RecordLog

logger = logging.getLogger(__name__)

STATE = "trainer_state.json"
BEST = "best.json"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


@dataclass
class TrainerState:
    """Where the run is and the best validation loss so far (``best_step`` -1: none measured yet)."""

    step: int = 0
    best_val_loss: float = math.inf
    best_step: int = -1
    train_seconds: float = 0.0  # summed over every run that contributed to this checkpoint

    def to_json(self, **extra) -> str:
        return json.dumps({**asdict(self), **extra}, indent=2) + "\n"

    @classmethod
    def from_dict(cls, d: dict) -> TrainerState:
        return cls(step=int(d["step"]), best_val_loss=float(d["best_val_loss"]), best_step=int(d["best_step"]),
                   train_seconds=float(d.get("train_seconds", 0.0)))


def _manifest(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != STATE}


def checkpoints(out: Path) -> list[tuple[int, Path]]:
    """``checkpoint-N`` folders, newest first (``.tmp`` ones are not checkpoints)."""
    found = [(int(m.group(1)), p) for p in out.glob("checkpoint-*")
             if p.is_dir() and (m := _CHECKPOINT.fullmatch(p.name))]
    return sorted(found, reverse=True)


def problem(folder: Path, step: int) -> str | None:
    """Why ``folder`` cannot be resumed from, or None when its manifest checks out."""
    try:
        saved = json.loads((folder / STATE).read_text())
        state = TrainerState.from_dict(saved)
    except FileNotFoundError:
        return f"no {STATE}"
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"unreadable {STATE} ({err})"
    if state.step != step:
        return f"{STATE} says step {state.step}"
    files = saved.get("files")
    if not files:
        return f"{STATE} lists no files"
    for name, size in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, {size} were written"
    return None


def latest_checkpoint(out: Path) -> tuple[Path, TrainerState] | None:
    """The newest complete checkpoint; incomplete ones (and staging leftovers) are reported and skipped."""
    if (out / "checkpoint").is_dir():
        logger.warning("%s: a checkpoint in an older layout, not resumed from; delete it", out / "checkpoint")
    for leftover in sorted(out.glob("checkpoint-*.tmp")):
        logger.warning("%s: an unfinished checkpoint (the run stopped while saving it); ignored", leftover)
    for step, folder in checkpoints(out):
        why = problem(folder, step)
        if why is None:
            return folder, TrainerState.from_dict(json.loads((folder / STATE).read_text()))
        logger.warning("%s is incomplete (%s); skipped, an older checkpoint is used", folder, why)
    return None


def save_checkpoint(accelerator, out: Path, state: TrainerState, keep: int) -> Path:
    """Save the accelerate state as ``checkpoint-<step>``: written whole under a ``.tmp`` name, then renamed. Then
    only the ``keep`` newest complete checkpoints are kept (older or broken ones are removed)."""
    final = out / f"checkpoint-{state.step}"
    tmp = tmp_path(final)
    if accelerator.is_main_process:
        remove(tmp)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))  # every process writes its part (RNG states at least)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / STATE).write_text(state.to_json(files=_manifest(tmp)))
        commit(tmp, final)
        write_text_atomic(out / STATE, state.to_json(checkpoint=final.name))
        kept = 0
        for step, folder in checkpoints(out):
            if kept < keep and problem(folder, step) is None:
                kept += 1
            else:
                remove(folder)
        for leftover in out.glob("checkpoint-*.tmp"):
            remove(leftover)
    accelerator.wait_for_everyone()
    return final


def start_over(out: Path) -> None:
    """Clear what an earlier run left (main process): ``resume: false``, or no checkpoint to resume from."""
    for _, folder in checkpoints(out):
        remove(folder)
    for path in [*out.glob("checkpoint-*.tmp"), out / "query_encoder", out / "metrics.jsonl", out / STATE]:
        remove(path)


def save_best(encoder, out: Path, step: int, val_loss: float) -> None:
    """Replace ``query_encoder/`` with ``encoder`` whole (main process only)."""
    with atomic_folder(out / "query_encoder") as tmp:
        encoder.save(tmp)
        (tmp / BEST).write_text(json.dumps({"step": step, "val_loss": val_loss}) + "\n")


def read_best(out: Path) -> tuple[float, int] | None:
    """(validation loss, step) of the encoder in ``query_encoder/``, None where there is none."""
    try:
        best = json.loads((out / "query_encoder" / BEST).read_text())
        return float(best["val_loss"]), int(best["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class MetricsLog:
    """``metrics.jsonl`` (a :class:`RecordLog` of every record, not keyed: a step can log a training record and an
    evaluation): appended per record; :meth:`keep_until` drops what a resumed run will log again."""

    def __init__(self, path: Path):
        self.path = path
        self.log = RecordLog(path, key=None)

    def keep_until(self, step: int) -> None:
        """Keep the records of steps <= ``step`` (a torn last line, from a kill mid-write, goes too)."""
        dropped = self.log.keep(lambda rec: isinstance(rec.get("step"), int) and rec["step"] <= step)
        if dropped:
            logger.info("%s: dropping %d records of steps after %d (they are redone)", self.path, dropped, step)

    def append(self, record: dict) -> None:
        self.log.append([record])


class GracefulStop:
    """``with GracefulStop() as stop:`` the first Ctrl-C (SIGINT, or SIGTERM as a scheduler or ``accelerate launch``
    sends it) only sets ``stop.requested``: the loop finishes its step, saves a checkpoint and stops. The handlers
    are then back to normal, so a second Ctrl-C interrupts at once (losing only the steps since the last checkpoint,
    as checkpoints are written whole). Each handler is given back as it was found; a signal ignored on entry is left
ignored. Outside the main thread signals cannot be caught and nothing changes."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested = False
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        self.requested = True
        self._restore()
        logger.warning("%s: finishing this step and saving a checkpoint (press Ctrl-C again to stop at once)",
                       signal.Signals(signum).name)

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: a handler set outside Python
        self._previous = {}

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            # A signal ignored on entry stays ignored: the launcher asked for it (a background job of a script
            # or CI runner ignores SIGINT, nohup SIGHUP), and a Ctrl-C meant for the foreground must not stop us.
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS
                              if signal.getsignal(sig) != signal.SIG_IGN}
        return self

    def __exit__(self, *exc) -> None:
        self._restore()
