"""What every benchmark script shares: the ``--json`` flag and file, timing, the machine's load, medians and spreads,
and plain-text tables. Scripts run as ``python bench/NAME.py``, which puts this folder on ``sys.path``."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", default=None, help="write the figures here as a flat JSON object")


def add_threads_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's; 1 on a shared CPU: idle-waiting threads of a busy "
                             "machine made one SmolLM2 decode step 6-30x slower here)")


def set_threads(threads: int | None) -> None:
    if threads:
        import torch  # only the scripts that run a model ask for threads (retrieval.py does not)

        torch.set_num_threads(threads)


def write_json(path: str | None, results: dict[str, Any]) -> None:
    """Write ``results`` (flat: numbers, strings, lists of numbers) to ``path``; nothing when ``path`` is None."""
    if not path:
        return
    nested = [k for k, v in results.items() if isinstance(v, dict)]
    if nested:
        raise ValueError(f"benchmark figures must be flat, but {', '.join(nested)} hold objects")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(results, indent=2))


def timed(fn):
    """``(fn(), seconds it took)``."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def load_1min() -> float:
    """The 1-minute load average: printed beside every timing, since these machines are shared."""
    return round(os.getloadavg()[0], 2)


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def format_table(header: list[str], rows: list[list[Any]], floats: str = ".2f") -> str:
    """Columns as wide as their widest cell; the first column left-aligned, the others right-aligned; floats with
    ``floats``, ``None`` as a dash."""
    def cell(x: Any) -> str:
        if x is None:
            return "-"
        return format(x, floats) if isinstance(x, float) else str(x)

    cells = [[cell(x) for x in row] for row in rows]
    widths = [max([len(str(h))] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    lines = []
    for row in [list(map(str, header))] + cells:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def print_table(header: list[str], rows: list[list[Any]], floats: str = ".2f") -> None:
    print(format_table(header, rows, floats))


def rotate_training_steps(trainer, variants: dict, batches: int, repeats: int):
    """Forward + backward (``trainer.training_step``, no optimizer step) of ``batches`` micro-batches at the same
    weights under every variant in rotation (A B C A B C ...: a neighbour's load hits all of them alike).
    ``variants[name](i)`` sets the model up for that variant and returns its form of batch ``i``; the first variant
    is the reference. Returns each variant's seconds per batch (one per repeat) and the largest relative loss and
    gradient differences from the reference."""
    import torch

    model = trainer.model
    seconds = {name: [[] for _ in range(batches)] for name in variants}
    reference = next(iter(variants))
    loss_diff = grad_diff = 0.0
    for _ in range(repeats):
        for i in range(batches):
            seen = {}
            for name, setup in variants.items():
                batch = setup(i)
                n_items = int((batch["labels"][..., 1:] != -100).sum())
                start = time.perf_counter()
                loss = trainer.training_step(model, batch, n_items)
                if model.device.type == "cuda":
                    torch.cuda.synchronize()
                seconds[name][i].append(time.perf_counter() - start)
                seen[name] = (float(loss), torch.cat([g.grad.flatten().float() for g in model.parameters()
                                                      if g.grad is not None]))
                model.zero_grad()
            print(f"    batch {i}: " + " ".join(f"{k} {v[i][-1]:.3f}s" for k, v in seconds.items()), flush=True)
            base_loss, base_grad = seen.pop(reference)
            for loss, grad in seen.values():
                loss_diff = max(loss_diff, abs(loss - base_loss) / abs(base_loss))
                grad_diff = max(grad_diff, float((grad - base_grad).norm() / base_grad.norm()))
    return seconds, loss_diff, grad_diff


def operator_table(fn, path: str | Path, rows: int = 25) -> str:
    """Run ``fn`` once under ``torch.profiler`` and write its operators, by their own CPU time (and CUDA time where
    a GPU ran), to ``path`` as a table; returns the table. The profiler's own cost per operator inflates the many
    small ones, so read shares between large operators, and take times from an unprofiled run."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        fn()
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=rows)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(table + "\n", encoding="utf-8")
    return table
