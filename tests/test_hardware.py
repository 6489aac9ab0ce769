"""Dense peak FLOP/s and MFU: never a sparse figure, never a guess."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.hardware import mfu, peak_flops


def test_h100_sxm_bf16_is_the_dense_figure() -> None:
    # Datasheet: 989.4 TFLOP/s dense BF16 (1979 with sparsity).
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989.4e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "32") == 66.9e12


@pytest.mark.parametrize(
    ("name", "precision", "expected"),
    [
        ("NVIDIA H100 PCIe", "bf16-mixed", 756.5e12),  # not the SXM figure
        ("NVIDIA H100 NVL", "bf16-mixed", 835.5e12),
        ("NVIDIA H200", "bf16-mixed", 989.4e12),
        ("NVIDIA A100-SXM4-80GB", "bf16-mixed", 312e12),
        ("NVIDIA A100-PCIE-40GB", "32", 19.5e12),
        ("NVIDIA L40S", "16-mixed", 362.05e12),
        ("Tesla V100-SXM2-16GB", "16-mixed", 125e12),
    ],
)
def test_known_devices(name: str, precision: str, expected: float) -> None:
    assert peak_flops(name, precision) == expected


@pytest.mark.parametrize(
    ("name", "precision"),
    [
        ("NVIDIA GeForce RTX 4090", "bf16-mixed"),
        ("NVIDIA A10", "bf16-mixed"),  # not an A100
        ("NVIDIA L40", "bf16-mixed"),  # not an L40S
        ("AMD EPYC 7763 64-Core Processor", "32"),
        ("", "32"),
        ("Tesla V100-SXM2-16GB", "bf16-mixed"),  # V100 has no bf16
        ("NVIDIA A100-SXM4-80GB", "64"),
    ],
)
def test_unknown_device_or_precision_has_no_peak(name: str, precision: str) -> None:
    assert peak_flops(name, precision) is None


def test_mfu_is_none_on_cpu() -> None:
    assert mfu(16320.0, 5000.0, "AMD EPYC 7763 64-Core Processor", "32") is None
    assert mfu(16320.0, 5000.0, "Intel(R) Xeon(R) Platinum 8480+", "bf16-mixed") is None


def test_mfu_arithmetic_on_a_known_gpu() -> None:
    # 1e9 FLOPs per sample at 312,000 samples/s on an A100 in bf16 is 312 TFLOP/s: 100 %.
    assert mfu(1e9, 312_000.0, "NVIDIA A100-SXM4-80GB", "bf16-mixed") == pytest.approx(1.0)
    assert mfu(1e9, 31_200.0, "NVIDIA A100-SXM4-80GB", "bf16-mixed") == pytest.approx(0.1)


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan])
def test_mfu_is_none_without_a_meaningful_rate(rate: float) -> None:
    assert mfu(1e9, rate, "NVIDIA H100 80GB HBM3", "bf16-mixed") is None


def test_mfu_is_none_without_a_flop_count() -> None:
    assert mfu(None, 1000.0, "NVIDIA H100 80GB HBM3", "bf16-mixed") is None


@given(
    flops=st.floats(1.0, 1e15),
    rate=st.floats(1e-3, 1e9),
    factor=st.floats(0.01, 100.0),
)
def test_mfu_is_proportional_to_throughput(flops: float, rate: float, factor: float) -> None:
    base = mfu(flops, rate, "NVIDIA H100 80GB HBM3", "bf16-mixed")
    scaled = mfu(flops, rate * factor, "NVIDIA H100 80GB HBM3", "bf16-mixed")
    assert base is not None and scaled is not None
    assert scaled == pytest.approx(base * factor, rel=1e-9)
