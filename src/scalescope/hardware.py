"""Dense peak FLOP/s of known accelerators, for MFU.

Vendor datasheet figures for *dense* math (the sparse figures, twice as large, are what some
tools use by mistake). Precision ``32`` means full FP32 matmuls (PyTorch's default
``float32_matmul_precision='highest'``, no TF32). A device missing from the table gets no
MFU rather than a guess.
"""

from __future__ import annotations

# (substring of torch.cuda.get_device_name(), {precision: FLOP/s}); first match wins, so
# more specific names come first.
_PEAKS: list[tuple[str, dict[str, float]]] = [
    ("H200", {"bf16-mixed": 989.4e12, "16-mixed": 989.4e12, "32": 66.9e12}),
    ("H100 PCIe", {"bf16-mixed": 756.5e12, "16-mixed": 756.5e12, "32": 51.2e12}),
    ("H100 NVL", {"bf16-mixed": 835.5e12, "16-mixed": 835.5e12, "32": 60.0e12}),
    ("H100", {"bf16-mixed": 989.4e12, "16-mixed": 989.4e12, "32": 66.9e12}),
    ("A100", {"bf16-mixed": 312e12, "16-mixed": 312e12, "32": 19.5e12}),
    ("L40S", {"bf16-mixed": 362.05e12, "16-mixed": 362.05e12, "32": 91.6e12}),
    ("V100", {"16-mixed": 125e12, "32": 15.7e12}),
]


def peak_flops(device_name: str, precision: str) -> float | None:
    for key, table in _PEAKS:
        if key in device_name:
            return table.get(precision)
    return None


def mfu(
    flops_per_sample: float | None,
    samples_per_s_per_device: float,
    device_name: str,
    precision: str,
) -> float | None:
    peak = peak_flops(device_name, precision)
    if peak is None or flops_per_sample is None or not samples_per_s_per_device > 0:
        return None
    return flops_per_sample * samples_per_s_per_device / peak
