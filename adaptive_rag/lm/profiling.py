"""Where the time of a run goes: named sections timed exclusively (a nested section's time is not also counted in
the one around it), plus counters and the work of each model call (tokens, LM-head rows, attention pairs: what the
benchmarks' compute bound is computed from). Off unless a caller attaches a :class:`Profile`; the decoder takes one
as ``BatchDecoder.profile`` and the benchmarks wrap the rest of a run in sections.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import NamedTuple


class ModelCall(NamedTuple):
    """One model call's work: ``tokens`` real (unpadded) positions through the layers, ``logits`` rows through the LM
    head, ``attention_pairs`` real (query, key) pairs scored per head and layer, ``kv_read`` distinct cached
    positions it had to read, and ``seconds``, its own wall time where the caller timed it alone (None for the steps
    inside ``generate``)."""

    phase: str
    tokens: int
    logits: int
    attention_pairs: int
    kv_read: int
    seconds: float | None = None


class Profile:
    """``with profile.section("prefill"): ...`` adds the block's own seconds (minus the sections nested inside it)
    to ``seconds["prefill"]``; ``count(name, n)`` adds to ``counts[name]``."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self._nested: list[float] = []  # per open section: seconds spent in sections nested inside it
        # the decoder times its calls with the choice of the next tokens and the attention rows' copy; only the
        # model's products are in the bound
        self.calls: list[ModelCall] = []

    @contextmanager
    def section(self, name: str):
        self._nested.append(0.0)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            inner = self._nested.pop()
            self.seconds[name] += elapsed - inner
            if self._nested:
                self._nested[-1] += elapsed

    def add(self, name: str, seconds: float) -> None:
        """Attribute ``seconds`` measured by the caller to ``name`` (and take them from the enclosing section)."""
        self.seconds[name] += seconds
        if self._nested:
            self._nested[-1] += seconds

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def work(self, phase: str, tokens: int, logits: int, attention_pairs: int, kv_read: int | None = None,
             seconds: float | None = None) -> None:
        """Record one model call (:class:`ModelCall`); ``kv_read`` defaults to one cached position per pair (a head
        shared by the batch's rows counts once)."""
        self.calls.append(ModelCall(phase, tokens, logits, attention_pairs,
                                    attention_pairs if kv_read is None else kv_read, seconds))

    def wrap(self, name: str, fn):
        """``fn`` timed as section ``name`` on every call."""
        def timed(*args, **kwargs):
            with self.section(name):
                return fn(*args, **kwargs)
        return timed
