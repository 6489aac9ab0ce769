"""Regression gate and exporters for continuous benchmarking on a cluster.

A *reference file* (YAML) holds, per series and scale, the values a result set must keep:
per-device throughput ``samples_per_s_per_device`` and the efficiency of its scaling mode
(``parallel_efficiency`` for strong scaling, ``per_device_throughput_efficiency`` for weak),
with a relative tolerance. A value fails the gate only when it is below
``reference x (1 - tolerance)`` AND that shortfall is significant at ``alpha``:

* per-device throughput: one-sided one-sample t-test of the repeats' log values against
  log(bound) (:func:`analysis.compute.stats.below_test`; the log scale of every interval of a
  positive quantity here);
* efficiency (a ratio of group means): significant when the upper end of its one-sided
  ``1 - alpha`` interval (delta method on the log scale, Welch df, as in the tables) is below
  the bound; the p-value is that of the same test.

Every number comes from :func:`analysis.compute.metrics.group_stats` and
:func:`analysis.compute.metrics.scaling_table`, so the gate checks exactly the headline figures the
summary shows. Series are identified by their key fields (:data:`~analysis.read.frame.SERIES_KEYS`),
stored as a mapping per series, and scales by ``nodes`` x ``devices_per_node``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from scipy import optimize as _opt
from scipy import stats as _sps

from analysis.compute.groups import group_stats, series_keys, series_labels
from analysis.compute.metrics import scaling_table
from analysis.compute.stats import below_test
from analysis.read.frame import SERIES_KEYS
from scalescope.atomic import write_text_atomic
from scalescope.config.files import load_yaml_text

REFERENCE_SCHEMA_VERSION = 1
DEFAULT_TOLERANCE = 0.05
DEFAULT_ALPHA = 0.05
DISPLAY_CONFIDENCE = 0.95
THROUGHPUT = "samples_per_s_per_device"
STEADY_THROUGHPUT = "steady_samples_per_s_per_device"
STRONG_EFFICIENCY = "parallel_efficiency"
WEAK_EFFICIENCY = "per_device_throughput_efficiency"
METRICS: dict[str, str] = {
    THROUGHPUT: "samples/s/device",
    STRONG_EFFICIENCY: "fraction",
    WEAK_EFFICIENCY: "fraction",
}
"""Checkable metrics and their units; bigger is better for all of them."""

OK = "ok"
BELOW = "below but not significant"
REGRESSION = "REGRESSION"
MISSING = "missing"

_TOP_KEYS = ("schema_version", "tolerance", "series")
_SERIES_ENTRY_KEYS = ("label", "key", "tolerance", "scales")
_SCALE_ENTRY_KEYS = ("nodes", "devices_per_node", *METRICS)


class BadReference(ValueError):
    """A reference file that cannot be used; the message names the file and the place."""


# --- series identity ----------------------------------------------------------------------------


def _canon(value: Any) -> Any:
    """A key value in comparable form: 256, 256.0 and numpy's 256 are one value."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def key_mapping(key: Sequence[Any]) -> dict[str, Any]:
    """A series key as {field: value} over :data:`SERIES_KEYS`, plain YAML/JSON values."""
    return {name: _canon(v) for name, v in zip(SERIES_KEYS, key, strict=True)}


KEY_DEFAULTS: dict[str, Any] = {"accumulate_grad_batches": 1, "strategy": "ddp", "max_steps": None}
"""Key fields added after reference files and tracker names existed, and the value they had
then: absent from a reference file means that value, and a series at it is named as before."""


def series_identity(key: Sequence[Any]) -> str:
    """A stable name for a series, made of its key fields alone (unlike the display label, it
    does not depend on which other series are in the result set): trackers chart by name."""
    return ",".join(
        f"{k}={v}"
        for k, v in key_mapping(key).items()
        if v is not None and not (k in KEY_DEFAULTS and v == KEY_DEFAULTS[k])
    )


def _canon_key(key: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(_canon(v) for v in key)


# --- the reference file -------------------------------------------------------------------------


@dataclass(frozen=True)
class Checked:
    """What a value is of: a series, a scale and a metric."""

    key: tuple[Any, ...]
    label: str
    nodes: int
    devices_per_node: int
    metric: str

    @property
    def match_key(self) -> tuple[tuple[Any, ...], int, int, str]:
        """The series key, scale and metric: what an expectation and a measurement match on."""
        return (self.key, self.nodes, self.devices_per_node, self.metric)


@dataclass(frozen=True)
class Expectation(Checked):
    """One checked value: a series, a scale, a metric, its reference and tolerance."""

    reference: float
    tolerance: float

    @property
    def bound(self) -> float:
        return self.reference * (1.0 - self.tolerance)


def _fail(path: Path, where: str, message: str) -> BadReference:
    return BadReference(f"{path}: {where}: {message}" if where else f"{path}: {message}")


def _check_keys(path: Path, where: str, entry: Any, allowed: Sequence[str]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise _fail(path, where, f"expected a mapping, got {type(entry).__name__}")
    unknown = [k for k in entry if k not in allowed]
    if unknown:
        raise _fail(
            path, where, f"unknown key {unknown[0]!r} (expected one of: {', '.join(allowed)})"
        )
    return entry


def _number(path: Path, where: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(path, where, f"expected a number, got {value!r}")
    if positive and value <= 0:
        raise _fail(path, where, f"expected a number > 0, got {value!r}")
    return float(value)


def _tolerance(path: Path, where: str, value: Any) -> float:
    t = _number(path, where, value)
    if not 0 <= t < 1:
        raise _fail(path, where, f"a relative tolerance must be in [0, 1), got {value!r}")
    return t


def _tolerances(path: Path, where: str, value: Any, default: float) -> dict[str, float]:
    """A series' ``tolerance``: a number for every metric, or {metric: number}."""
    if value is None:
        return dict.fromkeys(METRICS, default)
    if isinstance(value, dict):
        _check_keys(path, where, value, tuple(METRICS))
        return {m: _tolerance(path, f"{where}.{m}", value.get(m, default)) for m in METRICS}
    t = _tolerance(path, where, value)
    return dict.fromkeys(METRICS, t)


def _int(path: Path, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(path, where, f"expected an integer >= 1, got {value!r}")
    return value


def load_reference(path: str | os.PathLike[str]) -> list[Expectation]:
    """Read and validate a reference file; :class:`BadReference` names what is wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadReference(f"{path}: no such reference file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadReference(f"{path}: cannot read: {exc}") from None
    try:
        doc = load_yaml_text(text)  # as a config is read: 1e4 a number, off a string
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        raise _fail(path, where, "not valid YAML") from None
    doc = _check_keys(path, "", doc, _TOP_KEYS)
    version = doc.get("schema_version", REFERENCE_SCHEMA_VERSION)
    if version != REFERENCE_SCHEMA_VERSION:
        raise _fail(
            path, "schema_version", f"{version!r} is not {REFERENCE_SCHEMA_VERSION} (supported)"
        )
    default = _tolerance(path, "tolerance", doc.get("tolerance", DEFAULT_TOLERANCE))
    entries = doc.get("series")
    if not isinstance(entries, list) or not entries:
        raise _fail(path, "series", "expected a non-empty list of series")
    out: list[Expectation] = []
    seen: set[tuple[Any, ...]] = set()
    for i, entry in enumerate(entries):
        out += _series_entry(path, f"series[{i}]", entry, default, seen)
    return out


def _series_entry(
    path: Path, where: str, entry: Any, default: float, seen: set[tuple[Any, ...]]
) -> list[Expectation]:
    """The expectations of one ``series`` entry; ``seen`` collects (key, scale, metric) over
    the file, so that none is given twice."""
    entry = _check_keys(path, where, entry, _SERIES_ENTRY_KEYS)
    key = _series_key(path, f"{where}.key", entry.get("key"))
    label = entry.get("label") or series_identity(key)
    if not isinstance(label, str):
        raise _fail(path, f"{where}.label", f"expected a string, got {label!r}")
    tol = _tolerances(path, f"{where}.tolerance", entry.get("tolerance"), default)
    scales = entry.get("scales")
    if not isinstance(scales, list) or not scales:
        raise _fail(path, f"{where}.scales", "expected a non-empty list of scales")
    out = []
    for j, scale in enumerate(scales):
        sw = f"{where}.scales[{j}]"
        scale = _check_keys(path, sw, scale, _SCALE_ENTRY_KEYS)
        for name in ("nodes", "devices_per_node"):
            if name not in scale:
                raise _fail(path, sw, f"missing {name!r}")
        nodes = _int(path, f"{sw}.nodes", scale["nodes"])
        dpn = _int(path, f"{sw}.devices_per_node", scale["devices_per_node"])
        metrics = [m for m in METRICS if m in scale]
        if not metrics:
            raise _fail(path, sw, f"no reference value (one of: {', '.join(METRICS)})")
        for m in metrics:
            ident = (key, nodes, dpn, m)
            if ident in seen:
                raise _fail(path, f"{sw}.{m}", "given twice for this series and scale")
            seen.add(ident)
            value = _number(path, f"{sw}.{m}", scale[m], positive=True)
            out.append(Expectation(key, label, nodes, dpn, m, value, tol[m]))
    return out


def _series_key(path: Path, where: str, value: Any) -> tuple[Any, ...]:
    """A series entry's ``key``: every key field, a plain value each (fields added since,
    :data:`KEY_DEFAULTS`, may be absent)."""
    fields = _check_keys(path, where, value, SERIES_KEYS)
    fields = {**{k: v for k, v in KEY_DEFAULTS.items() if k not in fields}, **fields}
    absent = [k for k in SERIES_KEYS if k not in fields]
    if absent:
        raise _fail(
            path,
            where,
            f"missing key field {absent[0]!r} (a series is identified by all of: "
            f"{', '.join(SERIES_KEYS)}; regenerate with --write-reference)",
        )
    for k, v in fields.items():
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise _fail(path, f"{where}.{k}", f"expected a plain value, got {type(v).__name__}")
    return _canon_key([fields[k] for k in SERIES_KEYS])


# --- what was measured --------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement(Checked):
    """A measured value with its 95% interval and a one-sided test against any bound."""

    world_size: int
    n: int
    value: float
    ci_low: float
    ci_high: float
    p_below: Callable[[float, float], float]
    """(bound, alpha) -> one-sided p-value that the true value is below ``bound``."""


def _ratio_p_below(
    value: float, high_a: float, conf_a: float, high_b: float, conf_b: float, bound: float
) -> float:
    """One-sided p-value that a log-scale t-interval's centre is below ``bound``, from the
    upper ends of its two-sided intervals at two confidence levels.

    Each upper end is value * exp(t_{(1+c)/2, df} * se); two of them fix df (the ratio of the
    quantiles falls monotonically with df) and then se. This reads the figures exactly as
    :func:`analysis.compute.metrics.scaling_table` computes them, whatever time column it uses.
    """
    if any(math.isnan(x) for x in (value, high_a, high_b)) or not (value > 0 and bound > 0):
        return math.nan
    ha, hb = math.log(high_a / value), math.log(high_b / value)
    if ha <= 0 or hb <= 0:  # no spread at all: the value is what it is
        return 0.0 if value < bound else 1.0
    qa, qb = 0.5 + conf_a / 2.0, 0.5 + conf_b / 2.0

    def gap(log_df: float) -> float:
        df = math.exp(log_df)
        return float(_sps.t.ppf(qa, df) / _sps.t.ppf(qb, df)) - ha / hb

    lo, hi = math.log(0.5), math.log(1e9)  # Welch df >= 1 here; t saturates far below
    if gap(hi) >= 0:  # as flat as the normal distribution allows
        df = math.inf
    elif gap(lo) <= 0:
        df = 0.5
    else:
        df = math.exp(_opt.brentq(gap, lo, hi, xtol=1e-12))
    se = ha / float(_sps.t.ppf(qa, df) if math.isfinite(df) else _sps.norm.ppf(qa))
    t = math.log(value / bound) / se
    return float(_sps.t.cdf(t, df) if math.isfinite(df) else _sps.norm.cdf(t))


def measurements(runs: pd.DataFrame, alpha: float = DEFAULT_ALPHA) -> list[Measurement]:
    """Every checkable value of a runs frame, one per series, scale and metric."""
    if runs.empty:
        return []
    return [*_throughputs(runs), *_efficiencies(runs, alpha)]


def _throughputs(runs: pd.DataFrame) -> list[Measurement]:
    """Per series and scale: the headline per-device throughput, steady state where every run
    of the group has one, else whole training (as analysis.compute.metrics does for its
    tables)."""
    out: list[Measurement] = []
    groups = group_stats(runs, confidence=DISPLAY_CONFIDENCE)
    keys = series_keys(groups)
    labels = series_labels(list(dict.fromkeys(keys)))
    raw = _repeats(runs)
    for key, (_, g) in zip(keys, groups.iterrows(), strict=True):
        steady_values, whole_values = raw.get(
            (_canon_key(key), int(g["nodes"]), int(g["devices_per_node"])), ([], [])
        )
        has_steady = bool(steady_values) and not any(pd.isna(v) for v in steady_values)
        values = steady_values if has_steady else whole_values
        col = STEADY_THROUGHPUT if has_steady else THROUGHPUT

        def p(bound: float, a: float, values: list[float] = values) -> float:
            return below_test(values, bound, a).p_value

        out.append(
            Measurement(
                key=_canon_key(key),
                label=labels[key],
                nodes=int(g["nodes"]),
                devices_per_node=int(g["devices_per_node"]),
                world_size=int(g["world_size"]),
                metric=THROUGHPUT,
                n=len(values),
                value=float(g[f"{col}_mean"]),
                ci_low=float(g[f"{col}_ci_low"]),
                ci_high=float(g[f"{col}_ci_high"]),
                p_below=p,
            )
        )
    return out


def _repeats(
    runs: pd.DataFrame,
) -> dict[tuple[Any, ...], tuple[list[float], list[float]]]:
    """(series key, nodes, devices per node) -> every run's steady and whole-training
    per-device throughput."""
    raw: dict[tuple[Any, ...], tuple[list[float], list[float]]] = {}
    scales = zip(runs["nodes"].tolist(), runs["devices_per_node"].tolist(), strict=True)
    values_of = zip(runs[STEADY_THROUGHPUT], runs[THROUGHPUT], strict=True)
    rows = zip(series_keys(runs), scales, values_of, strict=True)
    for key, (nodes, dpn), (steady, whole) in rows:
        if not (pd.isna(nodes) or pd.isna(dpn)):
            pair = raw.setdefault((_canon_key(key), int(nodes), int(dpn)), ([], []))
            pair[0].append(steady)
            pair[1].append(whole)
    return raw


def _efficiencies(runs: pd.DataFrame, alpha: float) -> list[Measurement]:
    """Per series and scale beyond the baseline: the efficiency of its scaling mode."""
    out: list[Measurement] = []
    # The one-sided 1 - alpha bound is the upper end of the two-sided 1 - 2 alpha interval;
    # a second level fixes the degrees of freedom (see _ratio_p_below).
    conf_b = 1.0 - 2.0 * alpha if abs(1.0 - 2.0 * alpha - DISPLAY_CONFIDENCE) > 1e-6 else 0.90
    shown = scaling_table(runs, confidence=DISPLAY_CONFIDENCE)
    other = scaling_table(runs, confidence=conf_b)
    skeys = series_keys(shown)
    for i, key in enumerate(skeys):
        r, o = shown.iloc[i], other.iloc[i]
        if r["is_baseline"]:
            continue  # 1 by definition: nothing to check
        metric = WEAK_EFFICIENCY if r["scaling_mode"] == "weak" else STRONG_EFFICIENCY

        def p_eff(
            bound: float, _a: float, r: pd.Series = r, o: pd.Series = o, metric: str = metric
        ) -> float:
            return _ratio_p_below(
                float(r[metric]),
                float(r[f"{metric}_ci_high"]),
                DISPLAY_CONFIDENCE,
                float(o[f"{metric}_ci_high"]),
                conf_b,
                bound,
            )

        out.append(
            Measurement(
                key=_canon_key(key),
                label=str(r["series"]),
                nodes=int(r["nodes"]),
                devices_per_node=int(r["devices_per_node"]),
                world_size=int(r["world_size"]),
                metric=metric,
                n=int(min(r["n"], r["baseline_n"])),
                value=float(r[metric]),
                ci_low=float(r[f"{metric}_ci_low"]),
                ci_high=float(r[f"{metric}_ci_high"]),
                p_below=p_eff,
            )
        )
    return out


# --- the check ----------------------------------------------------------------------------------

CHECK_COLUMNS = [
    "series",
    "nodes",
    "devices_per_node",
    "metric",
    "reference",
    "tolerance",
    "bound",
    "measured",
    "ci_low",
    "ci_high",
    "n",
    "p_value",
    "verdict",
]


def check(
    runs: pd.DataFrame, expected: Sequence[Expectation], alpha: float = DEFAULT_ALPHA
) -> pd.DataFrame:
    """One row per expectation, in file order, with its verdict: ``ok`` (not below the bound),
    ``below but not significant``, ``REGRESSION`` (below and p < alpha) or ``missing``."""
    found = {m.match_key: m for m in measurements(runs, alpha)}
    rows = []
    for e in expected:
        m = found.get(e.match_key)
        row: dict[str, Any] = {
            "series": m.label if m is not None else e.label,
            "nodes": e.nodes,
            "devices_per_node": e.devices_per_node,
            "metric": e.metric,
            "reference": e.reference,
            "tolerance": e.tolerance,
            "bound": e.bound,
        }
        if m is None or math.isnan(m.value):
            row.update(measured=math.nan, ci_low=math.nan, ci_high=math.nan, n=0, p_value=math.nan)
            row["verdict"] = MISSING
        else:
            p = m.p_below(e.bound, alpha) if m.value < e.bound else math.nan
            row.update(measured=m.value, ci_low=m.ci_low, ci_high=m.ci_high, n=m.n, p_value=p)
            if m.value >= e.bound:
                row["verdict"] = OK
            elif p < alpha:
                row["verdict"] = REGRESSION
            else:
                row["verdict"] = BELOW
        rows.append(row)
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


def unreferenced(runs: pd.DataFrame, expected: Sequence[Expectation]) -> list[Measurement]:
    """Measured values the reference file says nothing about (shown as a note, not checked)."""
    known = {e.match_key for e in expected}
    return [m for m in measurements(runs) if m.match_key not in known]


# --- writing a reference ------------------------------------------------------------------------


def reference_document(runs: pd.DataFrame, tolerance: float = DEFAULT_TOLERANCE) -> dict[str, Any]:
    """The reference file for a result set: the mean of every checkable value."""
    series: dict[tuple[Any, ...], dict[str, Any]] = {}
    for m in measurements(runs):
        if math.isnan(m.value):
            continue
        entry = series.setdefault(
            m.key,
            {"label": m.label, "key": key_mapping(m.key), "scales": {}},
        )
        scale = entry["scales"].setdefault(
            (m.world_size, m.nodes, m.devices_per_node),
            {"nodes": m.nodes, "devices_per_node": m.devices_per_node},
        )
        scale[m.metric] = float(f"{m.value:.6g}")
    return {
        "schema_version": REFERENCE_SCHEMA_VERSION,
        "tolerance": tolerance,
        "series": [
            {**e, "scales": [e["scales"][k] for k in sorted(e["scales"])]} for e in series.values()
        ],
    }


REFERENCE_HEADER = """\
# scalescope reference values for `python -m analysis.summarize check RESULTS --reference FILE`.
# A value fails only when it is below reference x (1 - tolerance) and significantly so.
# tolerance: relative; per series as a number or {metric: number}. `label` is for people:
# series are matched by every field under `key`; scales by nodes x devices_per_node.
"""


def write_reference(path: str | os.PathLike[str], doc: Mapping[str, Any], force: bool) -> Path:
    """Write ``doc`` as YAML atomically (temp file + rename); an existing file only with
    ``force``. Raises FileExistsError otherwise."""
    path = Path(path)
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists; pass --force to replace it")
    text = REFERENCE_HEADER + yaml.safe_dump(
        dict(doc), sort_keys=False, allow_unicode=True, default_flow_style=False
    )
    try:
        return write_text_atomic(path, text, replace=force)
    except FileExistsError:
        raise FileExistsError(f"{path} exists; pass --force to replace it") from None


# --- exporters ----------------------------------------------------------------------------------

EXPORT_FORMATS = ("github-action-benchmark", "bencher")


def benchmark_name(m: Measurement) -> str:
    """``<series identity> @ <nodes>x<devices per node>``: stable across result sets."""
    return f"{series_identity(m.key)} @ {m.nodes}x{m.devices_per_node}"


def _ordered(runs: pd.DataFrame) -> list[Measurement]:
    return sorted(
        (m for m in measurements(runs) if not math.isnan(m.value)),
        key=lambda m: (benchmark_name(m), m.metric),
    )


def export_github_action_benchmark(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """github-action-benchmark's ``customBiggerIsBetter`` input: a list of
    {name, unit, value, range?, extra?} (``range`` and ``extra`` are free text)."""
    out = []
    for m in _ordered(runs):
        item: dict[str, Any] = {
            "name": f"{benchmark_name(m)} {m.metric}",
            "unit": METRICS[m.metric],
            "value": m.value,
        }
        if not (math.isnan(m.ci_low) or math.isnan(m.ci_high)):
            item["range"] = f"95% CI {m.ci_low:.6g} to {m.ci_high:.6g}"
        item["extra"] = f"n={m.n}; world_size={m.world_size}; series: {m.label}"
        out.append(item)
    return out


def export_bencher(runs: pd.DataFrame) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: {benchmark name: {measure slug: {value, lower_value?,
    upper_value?}}}; the bounds are the 95% interval where there is one."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for m in _ordered(runs):
        metric: dict[str, float] = {"value": m.value}
        if not (math.isnan(m.ci_low) or math.isnan(m.ci_high)):
            metric.update(lower_value=m.ci_low, upper_value=m.ci_high)
        out.setdefault(benchmark_name(m), {})[m.metric.replace("_", "-")] = metric
    return out
