"""Progress bars that read well both on a terminal and in a log file.

On a terminal tqdm redraws one line in place. Redirected to a file (``2>&1 | tee log``, a scheduler's log), every
redraw is kept: a bar updated ten times a second over an hour-long loop, or a library's per-tensor bar inside a
model load, fills the log with thousands of carriage-return segments. So, when stderr is not a TTY:

* :func:`bar_options` gives an outer bar (one per job: questions, steps) at most one update every
  :data:`LOG_INTERVAL_S` seconds, and switches inner bars (per batch, per tokenizer stage) off;
* :func:`library_bars_quiet` switches the bars of transformers ("Loading weights"), huggingface_hub and datasets off
  for the duration of a load, and restores them after.

On a terminal both leave everything as it was.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

# One update a minute is enough to see that a long job moves and how fast.
LOG_INTERVAL_S = 60.0


def interactive() -> bool:
    """Whether progress goes to a terminal (stderr is a TTY)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return False


def bar_options(*, inner: bool = False, disable: bool = False) -> dict[str, Any]:
    """tqdm keyword arguments for a bar: tqdm's own behaviour on a terminal; in a log file, an outer bar that
    writes at most every :data:`LOG_INTERVAL_S` seconds and no inner bar at all."""
    if interactive():
        return {"disable": disable}
    if inner:
        return {"disable": True}
    return {"disable": disable, "mininterval": LOG_INTERVAL_S}


def show_inner_progress(requested: bool = True) -> bool:
    """For APIs that take a ``show_progress`` flag (bm25s, our encoders): the caller's wish, on a terminal only."""
    return requested and interactive()


@contextlib.contextmanager
def library_bars_quiet() -> Iterator[None]:
    """Within the block, transformers', huggingface_hub's and (if loaded) datasets' progress bars are off when
    stderr is not a TTY; each library's previous setting is restored afterwards. ``HF_HUB_DISABLE_PROGRESS_BARS=0``
    (bars asked for explicitly) leaves them on."""
    from huggingface_hub import constants

    if interactive() or constants.HF_HUB_DISABLE_PROGRESS_BARS is False:
        yield
        return
    import huggingface_hub.utils as hub
    from transformers.utils import logging as hf_logging

    transformers_on, hub_on = hf_logging.is_progress_bar_enabled(), not hub.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # huggingface_hub's too
    datasets_logging = sys.modules.get("datasets.utils.logging")
    datasets_on = datasets_logging is not None and datasets_logging.is_progress_bar_enabled()
    if datasets_on:
        datasets_logging.disable_progress_bar()
    try:
        yield
    finally:
        if transformers_on:
            hf_logging.enable_progress_bar()  # turns huggingface_hub's on as well: set it back below
        if hub_on:
            hub.enable_progress_bars()
        else:
            hub.disable_progress_bars()
        if datasets_on:
            datasets_logging.enable_progress_bar()
