"""Whether bfloat16 pays on this CPU: a flag filter, then a short timed probe, remembered per machine.

bf16 is not faster on every CPU. With native bf16 dot products (AVX512-BF16 on AMD Zen 4 and Intel Cooper
Lake, AMX on Sapphire Rapids, the ``bf16`` feature of Arm v8.6 cores) oneDNN runs bf16 matmuls about twice as fast
as fp32; without them (an AVX2-only EPYC) every bf16 matmul converts to fp32 and back, and a SmolLM2 prefill ran
5.5-6x slower. So ``dtype="auto"`` on CPU keeps fp32 unless the flags say bf16 is native *and* a probe at the
process's thread count finds bf16 at least ``MIN_SPEEDUP`` faster on a prefill-shaped product (256 x 1024) @
(1024 x 1024) *and* not much slower (``MIN_DECODE_SPEEDUP``) on a one-row product, a lone sequence decoding.
The second shape matters where threads outnumber free cores: on this project's shared 2-core machine, a one-row
bf16 product took 17 ms with 2 threads (a parallel kernel waiting for a descheduled thread) against 0.08 ms for
fp32's single-threaded path, while the 256-row product still favoured bf16 two to one.

``ADAPTIVE_RAG_CPU_DTYPE=float32|bfloat16`` overrides the decision (``auto``, the default, decides); the test
suite pins ``float32`` so that results never depend on the machine that runs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from adaptive_rag.lm.gguf_convert import cache_dir
from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.errors import ConfigError

logger = logging.getLogger(__name__)

ENV_VAR = "ADAPTIVE_RAG_CPU_DTYPE"
X86_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo "flags"
ARM_BF16_FEATURES = ("bf16",)  # /proc/cpuinfo "Features"
MIN_SPEEDUP = 1.2  # bf16 must beat fp32 clearly: a noisy tie keeps fp32's precision
PROBE_SHAPE = (256, 1024, 1024)  # (rows, inner, columns): a short prefill through one projection
DECODE_SHAPE = (1, 1024, 1024)  # one sequence's decode step through the same projection
MIN_DECODE_SPEEDUP = 0.5  # bf16 may lose a little on one row (0.73-0.83x at 1 thread here), never collapse


@dataclass(frozen=True)
class ProbeResult:
    """Best-of seconds for one product of each shape in each dtype."""

    fp32_s: float  # PROBE_SHAPE
    bf16_s: float
    decode_fp32_s: float = 1.0  # DECODE_SHAPE
    decode_bf16_s: float = 1.0

    @property
    def speedup(self) -> float:
        return self.fp32_s / self.bf16_s if self.bf16_s > 0 else 0.0

    @property
    def decode_speedup(self) -> float:
        return self.decode_fp32_s / self.decode_bf16_s if self.decode_bf16_s > 0 else 0.0


@dataclass(frozen=True)
class CpuDtypeDecision:
    dtype: torch.dtype
    reason: str
    flags: tuple[str, ...]  # the native-bf16 flags this CPU reports
    capability: str  # torch.backends.cpu.get_cpu_capability()
    probe: ProbeResult | None = None  # None when the flags (or the override) decided without timing

    def describe(self) -> str:
        p = self.probe
        timing = (f"; probe 256 rows fp32 {p.fp32_s * 1e3:.2f} ms bf16 {p.bf16_s * 1e3:.2f} ms (x{p.speedup:.2f}), "
                  f"1 row fp32 {p.decode_fp32_s * 1e3:.3f} ms bf16 {p.decode_bf16_s * 1e3:.3f} ms "
                  f"(x{p.decode_speedup:.2f})" if p else "")
        return (f"CPU dtype {str(self.dtype).removeprefix('torch.')}: {self.reason} "
                f"[capability {self.capability}, {torch.get_num_threads()} threads, flags "
                f"{', '.join(self.flags) or 'none'}{timing}]")


def bf16_flags(cpuinfo: str | None = None) -> tuple[str, ...]:
    """The native-bf16 flags among the CPU's (first processor's) ``flags`` / ``Features`` line; none where there
    is no ``/proc/cpuinfo`` (macOS, Windows: fp32 there)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        try:
            cpuinfo = path.read_text(errors="replace") if path.is_file() else ""
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            present = set(value.split())
            return tuple(f for f in (*X86_BF16_FLAGS, *ARM_BF16_FEATURES) if f in present)
    return ()


def cpu_capability() -> str:
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return "unknown"


def _operands(dtype: torch.dtype, shape: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    rows, inner, cols = shape
    gen = torch.Generator().manual_seed(0)
    return torch.randn(rows, inner, generator=gen).to(dtype), torch.randn(inner, cols, generator=gen).to(dtype)


def _seconds(a: torch.Tensor, b: torch.Tensor, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        a @ b
    return (time.perf_counter() - start) / repeat


def _best_of(shape: tuple[int, int, int], rounds: int, repeat: int) -> dict[torch.dtype, float]:
    """Best-of-``rounds`` seconds per product of ``shape`` per dtype, after a warm-up; fp32 and bf16 alternate
    (A B A B ...) so that a neighbour's load hits both alike."""
    pairs = {dtype: _operands(dtype, shape) for dtype in (torch.float32, torch.bfloat16)}
    best = dict.fromkeys(pairs, float("inf"))
    with torch.no_grad():
        for a, b in pairs.values():
            a @ b  # warm-up: oneDNN builds its kernels on the first call
        for _ in range(rounds):
            for dtype, (a, b) in pairs.items():
                best[dtype] = min(best[dtype], _seconds(a, b, repeat))
    return best


def probe_bf16(shape: tuple[int, int, int] = PROBE_SHAPE, decode_shape: tuple[int, int, int] = DECODE_SHAPE,
               rounds: int = 3) -> ProbeResult:
    """Time both shapes in both dtypes (~0.1 s; up to ~1 s where threads wait on busy cores)."""
    prefill = _best_of(shape, rounds, repeat=1)
    decode = _best_of(decode_shape, rounds, repeat=10)  # ~0.1 ms each: timed ten at a time
    return ProbeResult(prefill[torch.float32], prefill[torch.bfloat16], decode[torch.float32], decode[torch.bfloat16])


def decide(flags: tuple[str, ...], capability: str, probe: Callable[[], ProbeResult],
           override: str | None = None, min_speedup: float = MIN_SPEEDUP) -> CpuDtypeDecision:
    """The decision from what the CPU reports; ``probe`` runs only when the flags allow bf16."""
    override = (override or "auto").strip().lower()
    if override in ("float32", "fp32"):
        return CpuDtypeDecision(torch.float32, f"{ENV_VAR}={override}", flags, capability)
    if override in ("bfloat16", "bf16"):
        return CpuDtypeDecision(torch.bfloat16, f"{ENV_VAR}={override}", flags, capability)
    if override != "auto":
        raise ConfigError(f"{ENV_VAR} must be auto, float32 or bfloat16, got '{override}'")
    if not flags:
        return CpuDtypeDecision(torch.float32, "no native bf16 (no avx512_bf16, amx_bf16 or bf16 flag)", flags,
                                capability)
    result = probe()
    if result.speedup < min_speedup:
        return CpuDtypeDecision(torch.float32, f"bf16 products only x{result.speedup:.2f} (< x{min_speedup})",
                                flags, capability, result)
    if result.decode_speedup < MIN_DECODE_SPEEDUP:
        return CpuDtypeDecision(torch.float32, f"bf16 one-row products x{result.decode_speedup:.2f} "
                                f"(< x{MIN_DECODE_SPEEDUP}): decoding would slow down", flags, capability, result)
    return CpuDtypeDecision(torch.bfloat16, f"bf16 products x{result.speedup:.2f} faster", flags, capability, result)


DECISIONS_FILE = "cpu_dtype.json"  # in the cache folder: one probed decision per CPU, torch and thread count


def _machine_key(flags: tuple[str, ...], capability: str) -> str:
    return f"{platform.processor() or platform.machine()}|{capability}|{','.join(flags)}|torch {torch.__version__}" \
           f"|threads {torch.get_num_threads()}"


def remembered(flags: tuple[str, ...], capability: str, probe: Callable[[], ProbeResult],
               path: Path | None = None) -> Callable[[], ProbeResult]:
    """``probe``, run once per machine key and remembered on disk: a timing probe decides differently under
    different load, and ``auto`` must give the same dtype (so the same greedy outputs) to every run on a machine.
    Delete the file (or set ADAPTIVE_RAG_CPU_DTYPE) to decide again."""
    path = path or cache_dir() / DECISIONS_FILE
    key = _machine_key(flags, capability)

    def cached() -> ProbeResult:
        try:
            known = json.loads(path.read_text())
        except (OSError, ValueError):
            known = {}
        if isinstance(known, dict) and isinstance(known.get(key), dict):
            with contextlib.suppress(TypeError):
                return ProbeResult(**known[key])
        result = probe()
        with contextlib.suppress(OSError):  # a read-only cache still decides, only not durably
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps({**(known if isinstance(known, dict) else {}),
                                           key: dataclasses.asdict(result)}, indent=1) + "\n")
        return result

    return cached


@functools.lru_cache(maxsize=1)
def cpu_auto_decision() -> CpuDtypeDecision:
    """The decision for this machine: probed once (where the flags allow bf16) and remembered on disk."""
    flags, capability = bf16_flags(), cpu_capability()
    decision = decide(flags, capability, remembered(flags, capability, probe_bf16), os.environ.get(ENV_VAR))
    logger.info("%s", decision.describe())
    return decision


def cpu_auto_dtype() -> torch.dtype:
    """What ``dtype="auto"`` means on this CPU: bfloat16 where the probe found it faster, else float32."""
    return cpu_auto_decision().dtype


if __name__ == "__main__":
    cpu_auto_decision.cache_clear()
    print(cpu_auto_decision().describe())
