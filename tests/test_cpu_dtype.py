"""dtype "auto" on CPU: the flag filter, the probe's decision and its per-process cache, with the probe
monkeypatched (no timing is asserted)."""

from __future__ import annotations

import pytest
import torch

from adaptive_rag.lm import cpu_dtype
from adaptive_rag.lm.cpu_dtype import ProbeResult, bf16_flags, decide
from adaptive_rag.lm.models import resolve_dtype
from adaptive_rag.plumbing.errors import ConfigError

ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\nbugs\t\t: none\n"
SAPPHIRE = "flags\t\t: avx2 avx512f amx_bf16 amx_tile\n"
EPYC_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


class Probe:
    """A probe that reports a fixed bf16 speed-up and counts its calls."""

    def __init__(self, speedup: float, decode_speedup: float = 0.8):
        self.result = ProbeResult(fp32_s=speedup * 1e-3, bf16_s=1e-3, decode_fp32_s=decode_speedup * 1e-4,
                                  decode_bf16_s=1e-4)
        self.calls = 0

    def __call__(self) -> ProbeResult:
        self.calls += 1
        return self.result


@pytest.mark.parametrize(("cpuinfo", "flags"), [(ZEN4, ("avx512_bf16",)), (SAPPHIRE, ("amx_bf16",)),
                                                 (EPYC_AVX2, ()), (GRAVITON3, ("bf16",)), ("", ())])
def test_native_bf16_flags_from_cpuinfo(cpuinfo, flags):
    assert bf16_flags(cpuinfo) == flags


def test_no_native_bf16_keeps_fp32_without_probing():
    probe = Probe(speedup=3.0)
    decision = decide((), "AVX2", probe)
    assert decision.dtype == torch.float32 and probe.calls == 0 and decision.probe is None
    assert "no native bf16" in decision.describe()


@pytest.mark.parametrize(("speedup", "dtype"), [(2.0, torch.bfloat16), (1.2, torch.bfloat16),
                                                 (1.19, torch.float32), (0.2, torch.float32)])
def test_native_bf16_goes_by_the_probe(speedup, dtype):
    probe = Probe(speedup)
    decision = decide(("avx512_bf16",), "AVX512", probe)
    assert decision.dtype == dtype and probe.calls == 1
    assert decision.probe.speedup == pytest.approx(speedup)


def test_bf16_that_collapses_on_one_row_keeps_fp32():
    # 2 threads on a busy 2-core machine: 256 rows x1.51, one row 0.097 ms fp32 vs 11.5 ms bf16
    decision = decide(("avx512_bf16",), "AVX512", Probe(speedup=1.51, decode_speedup=0.0084))
    assert decision.dtype == torch.float32 and "decoding would slow down" in decision.reason


@pytest.mark.parametrize(("override", "dtype"), [("float32", torch.float32), ("bf16", torch.bfloat16),
                                                 (" BFloat16 ", torch.bfloat16), ("fp32", torch.float32)])
def test_override_decides_without_probing(override, dtype):
    probe = Probe(speedup=3.0)
    assert decide(("avx512_bf16",), "AVX512", probe, override).dtype == dtype and probe.calls == 0


def test_bad_override_is_one_line():
    with pytest.raises(ConfigError, match="ADAPTIVE_RAG_CPU_DTYPE must be auto, float32 or bfloat16, got 'half'"):
        decide((), "AVX2", Probe(1.0), "half")


@pytest.fixture()
def fresh_decision(monkeypatch, tmp_path):
    """The process-wide decision cleared before and after, with the flags and the probe under the test's control
    (and the machine's remembered decision in a folder of the test's own)."""
    monkeypatch.delenv(cpu_dtype.ENV_VAR, raising=False)
    monkeypatch.setattr(cpu_dtype, "cache_dir", lambda: tmp_path)
    cpu_dtype.cpu_auto_decision.cache_clear()
    yield monkeypatch
    cpu_dtype.cpu_auto_decision.cache_clear()


def test_auto_on_cpu_probes_once_per_process(fresh_decision):
    probe = Probe(speedup=2.0)
    fresh_decision.setattr(cpu_dtype, "bf16_flags", lambda: ("avx512_bf16",))
    fresh_decision.setattr(cpu_dtype, "probe_bf16", probe)
    assert resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16
    assert probe.calls == 1


def test_auto_on_an_avx2_cpu_is_fp32(fresh_decision):
    probe = Probe(speedup=3.0)
    fresh_decision.setattr(cpu_dtype, "bf16_flags", lambda: bf16_flags(EPYC_AVX2))
    fresh_decision.setattr(cpu_dtype, "probe_bf16", probe)
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32 and probe.calls == 0


def test_explicit_dtypes_and_cuda_never_probe(fresh_decision):
    probe = Probe(speedup=0.1)
    fresh_decision.setattr(cpu_dtype, "probe_bf16", probe)
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    assert resolve_dtype("float32", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert probe.calls == 0


def test_env_override_reaches_auto(fresh_decision):
    fresh_decision.setenv(cpu_dtype.ENV_VAR, "bfloat16")
    fresh_decision.setattr(cpu_dtype, "bf16_flags", lambda: ())
    assert resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16


def test_real_probe_times_both_dtypes():
    result = cpu_dtype.probe_bf16(shape=(8, 16, 16), rounds=1)
    assert result.fp32_s > 0 and result.bf16_s > 0 and result.speedup > 0


def test_the_probe_runs_once_per_machine_and_is_remembered(tmp_path):
    """A timing probe decides differently under load: the first decision is kept on disk, so every later run on the
    machine gets the same dtype (and the same greedy outputs)."""
    path = tmp_path / "cpu_dtype.json"
    calls = []

    def probe(result):
        def run():
            calls.append(result)
            return result
        return run

    fast, slow = cpu_dtype.ProbeResult(1.0, 0.4, 1.0, 1.0), cpu_dtype.ProbeResult(1.0, 1.0, 1.0, 1.0)
    first = cpu_dtype.decide(("avx512_bf16",), "AVX512", cpu_dtype.remembered(("avx512_bf16",), "AVX512",
                                                                            probe(fast), path))
    # a second run whose own probe would say "slower" still decides as the first did, without probing
    again = cpu_dtype.decide(("avx512_bf16",), "AVX512", cpu_dtype.remembered(("avx512_bf16",), "AVX512",
                                                                            probe(slow), path))
    assert first.dtype == again.dtype == torch.bfloat16 and calls == [fast]
    path.write_text("not json")  # a broken file: probe again and rewrite it
    third = cpu_dtype.decide(("avx512_bf16",), "AVX512", cpu_dtype.remembered(("avx512_bf16",), "AVX512",
                                                                            probe(slow), path))
    assert third.dtype == torch.float32 and calls == [fast, slow]
