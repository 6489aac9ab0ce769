"""Dense peak FLOP/s of known accelerators, for MFU.

Vendor datasheet figures for *dense* math. Datasheets print the tensor-core figures "with
sparsity" (marked ``*``); the dense figure is half of that, and that half is what is listed
here (the sparse figures are what some tools use by mistake). Precision ``32`` means full
FP32 matmuls (PyTorch's default ``float32_matmul_precision='highest'``, no TF32), so it is
the plain FP32 (CUDA core) figure.

Matching is exact on the name ``torch.cuda.get_device_name()`` returns, after folding case
and spacing and dropping a leading ``NVIDIA `` / ``Tesla ``: substrings never match, so an
``NVIDIA RTX A1000`` is not an A100 and an ``NVIDIA L40`` is not an L40S. A device missing from
the table gets no MFU rather than a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class PeakEntry:
    """One table entry: a product, the names its driver reports, its dense peaks."""

    name: str
    """Product name, e.g. ``H100 SXM``."""
    device_names: tuple[str, ...]
    """What ``torch.cuda.get_device_name()`` returns for it (nvidia-smi's name)."""
    flops_per_s: dict[str, float]
    """Dense peak FLOP/s per precision (``bf16-mixed``, ``16-mixed``, ``32``)."""
    datasheet: str
    """Document title and year the figures come from."""

    @property
    def label(self) -> str:
        """What a record stores to say which entry matched."""
        return f"{self.name} ({self.datasheet})"


_H100 = "NVIDIA H100 Tensor Core GPU Datasheet, 2023"
_H200 = "NVIDIA H200 Tensor Core GPU Datasheet, 2024"
_A100 = "NVIDIA A100 Tensor Core GPU Datasheet, 2021"
_L40S = "NVIDIA L40S GPU Datasheet, 2023"
_L4 = "NVIDIA L4 Tensor Core GPU Datasheet, 2023"
_V100 = "NVIDIA V100 Tensor Core GPU Datasheet, 2020"


def _tc(tensor: float, fp32: float, *, bf16: bool = True) -> dict[str, float]:
    """Peaks from the datasheet's dense tensor-core (FP16/BF16) and FP32 figures, in TFLOP/s."""
    out = {"16-mixed": tensor * 1e12, "32": fp32 * 1e12}
    if bf16:
        out["bf16-mixed"] = tensor * 1e12
    return out


PEAKS: tuple[PeakEntry, ...] = (
    # H100: 1,979* / 1,513* / 1,671* TFLOP/s BF16 and FP16 with sparsity; FP32 67 / 51 / 60.
    PeakEntry("H100 SXM", ("NVIDIA H100 80GB HBM3",), _tc(989.5, 67.0), _H100),
    PeakEntry("H100 PCIe", ("NVIDIA H100 PCIe",), _tc(756.5, 51.0), _H100),
    PeakEntry("H100 NVL", ("NVIDIA H100 NVL",), _tc(835.5, 60.0), _H100),
    # H200: SXM as H100 SXM (1,979*, FP32 67); NVL 1,671*, FP32 60.
    PeakEntry("H200 SXM", ("NVIDIA H200",), _tc(989.5, 67.0), _H200),
    PeakEntry("H200 NVL", ("NVIDIA H200 NVL",), _tc(835.5, 60.0), _H200),
    # A100: every form factor lists BF16/FP16 312 (624*) and FP32 19.5.
    PeakEntry("A100 SXM4 40GB", ("NVIDIA A100-SXM4-40GB",), _tc(312.0, 19.5), _A100),
    PeakEntry("A100 SXM4 80GB", ("NVIDIA A100-SXM4-80GB",), _tc(312.0, 19.5), _A100),
    PeakEntry("A100 PCIe 40GB", ("NVIDIA A100-PCIE-40GB",), _tc(312.0, 19.5), _A100),
    PeakEntry("A100 PCIe 80GB", ("NVIDIA A100 80GB PCIe",), _tc(312.0, 19.5), _A100),
    # L40S: BF16/FP16 362.05 (733*), FP32 91.6. L4: BF16/FP16 121 (242*), FP32 30.3.
    PeakEntry("L40S", ("NVIDIA L40S",), _tc(362.05, 91.6), _L40S),
    PeakEntry("L4", ("NVIDIA L4",), _tc(121.0, 30.3), _L4),
    # V100: tensor (FP16) 125 / 112, FP32 15.7 / 14; no BF16 on Volta.
    PeakEntry(
        "V100 SXM2",
        ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"),
        _tc(125.0, 15.7, bf16=False),
        _V100,
    ),
    PeakEntry(
        "V100 PCIe",
        ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"),
        _tc(112.0, 14.0, bf16=False),
        _V100,
    ),
)


def normalise(device_name: str) -> str:
    """Case and spacing folded, a leading ``NVIDIA``/``Tesla`` dropped: the matching key."""
    key = re.sub(r"\s+", " ", device_name).strip().lower()
    for prefix in ("nvidia ", "tesla "):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key


_BY_NAME: dict[str, PeakEntry] = {}
for _entry in PEAKS:
    for _name in _entry.device_names:
        assert normalise(_name) not in _BY_NAME, f"{_name} listed twice"
        _BY_NAME[normalise(_name)] = _entry


def lookup(device_name: str) -> PeakEntry | None:
    """The table entry whose device name equals ``device_name`` (normalised), else None."""
    return _BY_NAME.get(normalise(device_name))


def peak_flops(device_name: str, precision: str) -> float | None:
    entry = lookup(device_name)
    return None if entry is None else entry.flops_per_s.get(precision)


def peak_entry_label(device_name: str, precision: str) -> str | None:
    """Which entry gave :func:`peak_flops` its figure (name and datasheet); None if none."""
    entry = lookup(device_name)
    if entry is None or precision not in entry.flops_per_s:
        return None
    return entry.label


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
