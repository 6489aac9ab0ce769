"""The runs table's GPU columns: training and validation peak memory apart, NVML's
utilisation and the share of compute the GPU idled, shown where some run recorded them."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.present.display import is_missing, num, pct

GPU_COLUMNS = {
    "Peak mem train/val (GiB)": ("peak_mem_gib_max", "val_peak_mem_gib_max"),
    "GPU util (NVML)": ("gpu_util_pct",),
    "GPU idle in compute": ("gpu_idle_share",),
}
GPU_CAPTION = (
    " GPU runs: peak device memory of training and of validation apart (the larger of the "
    "ranks'); GPU util: NVML's utilisation over the steady state; GPU idle in compute: the "
    "share of compute the GPU ran no kernel (host overhead)."
)


def gpu_columns(runs: pd.DataFrame) -> list[str]:
    """The GPU columns some run of ``runs`` recorded (none for CPU runs and older records)."""
    return [
        name
        for name, cols in GPU_COLUMNS.items()
        if any(c in runs and bool(runs[c].notna().any()) for c in cols)
    ]


def gpu_cells(c: dict[str, list[Any]], i: int, shown: list[str]) -> list[str]:
    cells = {
        "Peak mem train/val (GiB)": f"{num(c['peak_mem_gib_max'][i])} / "
        f"{num(c['val_peak_mem_gib_max'][i])}",
        "GPU util (NVML)": pct(_fraction(c["gpu_util_pct"][i]), 0),
        "GPU idle in compute": pct(c["gpu_idle_share"][i], 0),
    }
    return [cells[name] for name in shown]


def _fraction(percent: Any) -> Any:
    return percent if is_missing(percent) else float(percent) / 100
