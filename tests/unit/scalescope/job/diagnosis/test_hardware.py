"""Dense peak FLOP/s and MFU: never a sparse figure, never a guess."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.diagnosis.hardware import PEAKS, lookup, mfu, peak_entry_label, peak_flops


def test_h100_sxm_bf16_is_the_dense_figure() -> None:
    # Datasheet: 1,979 TFLOP/s BF16 with sparsity, so 989.5 dense; FP32 67.
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989.5e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "32") == 67.0e12


@pytest.mark.parametrize(
    ("name", "precision", "expected"),
    [
        ("NVIDIA H100 PCIe", "bf16-mixed", 756.5e12),  # not the SXM figure
        ("NVIDIA H100 NVL", "bf16-mixed", 835.5e12),
        ("NVIDIA H200", "bf16-mixed", 989.5e12),
        ("NVIDIA H200 NVL", "bf16-mixed", 835.5e12),  # not the H200 SXM figure
        ("NVIDIA A100 80GB PCIe", "bf16-mixed", 312e12),
        ("NVIDIA L4", "bf16-mixed", 121e12),
        ("Tesla V100-PCIE-32GB", "32", 14e12),
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
        ("NVIDIA RTX A1000", "bf16-mixed"),  # contains "A100" but is not one
        ("NVIDIA RTX A1000 6GB Laptop GPU", "32"),
        ("NVIDIA A100X", "bf16-mixed"),
        ("NVIDIA H100", "bf16-mixed"),  # which H100? never guessed
        ("NVIDIA GH200 480GB", "bf16-mixed"),
        ("NVIDIA L4 Ti", "32"),
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


EVERY_NAME = [(name, entry) for entry in PEAKS for name in entry.device_names]


@pytest.mark.parametrize(("name", "entry"), EVERY_NAME, ids=[n for n, _ in EVERY_NAME])
def test_every_listed_name_matches_its_own_entry(name: str, entry: object) -> None:
    assert lookup(name) is entry
    # the driver's spelling may differ in case, spacing or the vendor prefix
    assert lookup(f"  {name.upper()}  ") is entry
    assert lookup(name.replace("NVIDIA ", "").replace("Tesla ", "")) is entry
    assert lookup(name.replace(" ", "  ")) is entry


def test_every_entry_names_its_datasheet_and_has_dense_fp32_and_fp16() -> None:
    names = [e.name for e in PEAKS]
    assert len(names) == len(set(names))
    for entry in PEAKS:
        assert "Datasheet" in entry.datasheet and entry.datasheet[-4:].isdigit(), entry
        assert {"32", "16-mixed"} <= set(entry.flops_per_s), entry
        # tensor-core math beats plain FP32 on every listed GPU
        assert entry.flops_per_s["16-mixed"] > entry.flops_per_s["32"], entry


@pytest.mark.parametrize(
    ("name", "product"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ],
)
def test_the_label_names_the_entry_and_its_datasheet(name: str, product: str) -> None:
    label = peak_entry_label(name, "16-mixed")
    assert label is not None and label.startswith(f"{product} (") and "Datasheet" in label


def test_no_label_where_there_is_no_peak() -> None:
    assert peak_entry_label("NVIDIA RTX A1000", "bf16-mixed") is None
    assert peak_entry_label("AMD EPYC 7763 64-Core Processor", "32") is None
    assert peak_entry_label("Tesla V100-SXM2-16GB", "bf16-mixed") is None


def test_an_a1000_gets_no_mfu() -> None:
    assert mfu(1e9, 1e5, "NVIDIA RTX A1000", "bf16-mixed") is None
