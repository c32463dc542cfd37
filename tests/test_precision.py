"""The `auto` precision rule (swe_rlvr.precision): bf16 only where the device multiplies it
natively, for the engine's weights and the trainer's autocast alike."""

from __future__ import annotations

import logging

import pytest
import torch

from swe_rlvr import precision

CPU = torch.device("cpu")


@pytest.fixture
def cpu_probes(monkeypatch):
    """Set what torch's CPU probes report, for the rule's one cached answer."""
    monkeypatch.delenv(precision.NO_CPU_BF16_ENV, raising=False)   # the suite sets it

    def report(avx512_bf16: bool, amx: bool) -> None:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
        precision.cpu_bf16.cache_clear()
    yield report
    precision.cpu_bf16.cache_clear()


def test_the_override_makes_auto_fp32_on_a_bf16_cpu(cpu_probes, monkeypatch):
    cpu_probes(True, True)
    monkeypatch.setenv(precision.NO_CPU_BF16_ENV, "1")
    precision.cpu_bf16.cache_clear()
    assert precision.engine_dtype("auto", CPU) == torch.float32
    assert not precision.autocast_enabled("auto", CPU)
    assert precision.engine_dtype("bfloat16", CPU) == torch.bfloat16   # explicit stays explicit


@pytest.mark.parametrize("avx512_bf16, amx, native", [
    (False, False, False),     # AVX2 only: bf16 is emulated
    (True, False, True),
    (False, True, True),
])
def test_auto_is_bf16_exactly_where_the_cpu_multiplies_it(cpu_probes, avx512_bf16, amx, native):
    engine_dtype, autocast_enabled = precision.engine_dtype, precision.autocast_enabled
    cpu_probes(avx512_bf16, amx)
    assert precision.native_bf16(CPU) is native
    assert engine_dtype("auto", CPU) == (torch.bfloat16 if native else torch.float32)
    assert autocast_enabled("auto", CPU) is native
    assert engine_dtype("bfloat16", CPU) == torch.bfloat16 and autocast_enabled("bf16", CPU)
    assert engine_dtype("float32", CPU) == torch.float32 and not autocast_enabled("fp32", CPU)


def test_an_explicit_bf16_where_it_is_emulated_is_kept_with_a_warning_naming_the_setting(
        cpu_probes, caplog):
    cpu_probes(False, False)
    with caplog.at_level(logging.WARNING, logger="swe_rlvr.precision"):
        precision.warn_if_emulated("engine.dtype=bfloat16", CPU)
    assert "engine.dtype=bfloat16 on a CPU without bf16 instructions" in caplog.text
    assert "set it to auto" in caplog.text
    cpu_probes(False, True)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="swe_rlvr.precision"):
        precision.warn_if_emulated("trainer.autocast=bf16", CPU)
    assert not caplog.text


def test_the_quickstart_leaves_its_precision_to_the_rule():
    from swe_rlvr.config import load_config
    cfg = load_config("configs/quickstart.yaml")
    assert (cfg.engine.dtype, cfg.trainer.autocast, cfg.trainer.old_logprobs) == (
        "auto", "auto", "sampler")
