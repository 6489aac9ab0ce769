"""The projection scored on published multi-node results (``python -m analysis.project``).

Each case (format: ``benchmarks/projection_cases.yaml``) gives a model's gradient bytes and
buckets, the hardware's devices per node and link bandwidths, its ``measured`` small-scale
throughputs (what a user would have run) and its ``published`` larger-scale ones (the truth).
From the measured points alone, the step model of :mod:`analysis.compute.projection` predicts each
published point's efficiency against one node (or one GPU), with its interval.

The step model needs what a scalescope record has and a published table lacks; a case fills
it from what it states, and the rest is an assumption, drawn over its band in the interval:

* compute per step: the 1-GPU point's step time when measured, else the 1-node step less the
  intra-node all-reduce the model exposes there;
* all-reduce: the case's buckets (``bucket_mb``, or DDP's 25 MB) on a latency-bandwidth
  model with latency ``ALPHA_INTRA_S`` / ``ALPHA_INTER_S`` at 2 ranks and the case's bus
  bandwidths: inter-node within ``INTER_BAND`` of the stated link, or
  ``UNKNOWN_INTER_BAND`` of the intra-node one where the case states none;
* stragglers: sigma = ``SIGMA_SHARE`` of the step's compute (drawn from 0 to twice that);
* the rest of the anchor's step (the whole loss, since a table has no parts) carried by each
  of the projection's explanations in turn (:data:`analysis.compute.step_model.CARRIES`);
* the error model: the shipped one (:mod:`analysis.compute.model_error`), or for
  cross-validation one fitted on the other sources.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from analysis.compute.model_error import (
    ErrorModel,
    Scored,
    cross_validate,
    features,
    score,
    totals,
)
from analysis.compute.model_error import load as load_error_model
from analysis.compute.projection import DRAWS
from analysis.compute.step_model import CARRIES, Level, Network, StepModel, expected_max
from scalescope.allreduce_model import ddp_bucket_bytes

ALPHA_INTRA_S = 20e-6
ALPHA_INTER_S = 50e-6
INTER_BAND = (0.4, 1.0)
"""Achieved inter-node bus bandwidth as a share of the stated link."""
UNKNOWN_INTER_SHARE = 1.0
UNKNOWN_INTER_BAND = (0.1, 1.0)
"""Where a case states no inter-node link: its bus bandwidth at 10-100% of the intra-node
one (centre 32%), from Ethernet beside PCIe to a rail of NICs per GPU beside NVLink."""
INTRA_DEFAULT_GBPS = 100.0
SIGMA_SHARE = 0.01
DDP_BUCKET_MB = 25.0


class CaseError(ValueError):
    """A case that cannot be read; the message names the case and the field."""


@dataclass(frozen=True)
class Point:
    nodes: int
    devices_per_node: int
    throughput_per_device: float
    efficiency_vs_1node: float | None = None
    efficiency_vs_1gpu: float | None = None


@dataclass(frozen=True)
class Case:
    name: str
    devices_per_node: int
    grad_bytes: float
    bucket_mb: float
    scaling: str
    per_device_batch: float
    grad_accum: int
    intra_busbw_gbps: float | None
    inter_busbw_gbps: float | None
    measured: tuple[Point, ...]
    published: tuple[Point, ...]
    group: str = ""
    """The source the case comes from (``source_group``, else its name): cross-validation
    leaves one source out at a time, since cases of one source share its methods."""


def _number(case: str, where: str, value: Any, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise CaseError(f"case {case!r}: {where} must be a positive number, got {value!r}")
    return float(value)


def _required(case: str, where: str, value: Any) -> float:
    number = _number(case, where, value)
    assert number is not None
    return number


def read_cases(path: str) -> list[Case]:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CaseError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise CaseError(f"{path} is not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise CaseError(f"{path}: expected a mapping with a list 'cases'")
    out = []
    for i, raw in enumerate(data["cases"]):
        if not isinstance(raw, dict):
            raise CaseError(f"{path}: cases[{i}] is not a mapping")
        name = str(raw.get("name") or f"cases[{i}]")
        hw, model = raw.get("hardware") or {}, raw.get("model") or {}
        if not isinstance(hw, dict) or not isinstance(model, dict):
            raise CaseError(f"case {name!r}: hardware and model must be mappings")

        def points(key: str, name: str = name, raw: dict[str, Any] = raw) -> tuple[Point, ...]:
            rows = raw.get(key)
            if not isinstance(rows, list) or not rows:
                raise CaseError(f"case {name!r}: {key} must be a non-empty list")
            pts = []
            for j, r in enumerate(rows):
                if not isinstance(r, dict):
                    raise CaseError(f"case {name!r}: {key}[{j}] is not a mapping")
                nodes = r.get("nodes")
                dpn = r.get("devices_per_node")
                if not isinstance(nodes, int) or not isinstance(dpn, int) or nodes < 1 or dpn < 1:
                    raise CaseError(
                        f"case {name!r}: {key}[{j}] needs integer nodes and devices_per_node"
                    )
                x = _number(
                    name, f"{key}[{j}].throughput_per_device", r.get("throughput_per_device")
                )
                effs = [
                    _number(name, f"{key}[{j}].{k}", r.get(k), optional=True)
                    for k in ("efficiency_vs_1node", "efficiency_vs_1gpu")
                ]
                if key == "published" and effs == [None, None]:
                    raise CaseError(
                        f"case {name!r}: {key}[{j}] needs efficiency_vs_1node or efficiency_vs_1gpu"
                    )
                pts.append(Point(nodes, dpn, float(x), *effs))  # type: ignore[arg-type]
            return tuple(pts)

        measured, published = points("measured"), points("published")
        dpn = hw.get("devices_per_node")
        if not isinstance(dpn, int) or dpn < 1:
            raise CaseError(f"case {name!r}: hardware.devices_per_node must be an integer >= 1")
        has_node = any(p.nodes == 1 and p.devices_per_node == dpn for p in measured)
        has_gpu = any(p.nodes * p.devices_per_node == 1 for p in measured)
        if not has_node and not has_gpu:
            raise CaseError(
                f"case {name!r}: measured needs the 1-node point ({dpn} devices) or 1 GPU"
            )
        for j, p in enumerate(published):
            if (p.efficiency_vs_1node is None and not has_gpu) or (
                p.efficiency_vs_1node is not None and not has_node and p.efficiency_vs_1gpu is None
            ):
                raise CaseError(
                    f"case {name!r}: published[{j}]'s efficiency has no measured reference "
                    "point (1 node for efficiency_vs_1node, 1 GPU for efficiency_vs_1gpu)"
                )
        scaling = raw.get("scaling", "weak")
        if scaling not in ("weak", "strong"):
            raise CaseError(f"case {name!r}: scaling must be weak or strong, got {scaling!r}")
        out.append(
            Case(
                name=name,
                devices_per_node=dpn,
                grad_bytes=_required(name, "model.grad_bytes", model.get("grad_bytes")),
                bucket_mb=float(
                    _number(name, "model.bucket_mb", model.get("bucket_mb"), optional=True)
                    or DDP_BUCKET_MB
                ),
                scaling=scaling,
                per_device_batch=_required(name, "per_device_batch", raw.get("per_device_batch")),
                grad_accum=int(raw.get("grad_accum") or 1),
                intra_busbw_gbps=_number(
                    name, "hardware.intra_busbw_gbps", hw.get("intra_busbw_gbps"), optional=True
                ),
                inter_busbw_gbps=_number(
                    name, "hardware.inter_busbw_gbps", hw.get("inter_busbw_gbps"), optional=True
                ),
                measured=measured,
                published=published,
                group=str(raw.get("source_group") or name),
            )
        )
    return out


def reference(case: Case) -> tuple[Point, str]:
    """The measured point efficiencies are scored against: one node where the published
    points give an efficiency against it, else one GPU; and the published field to use."""
    d = case.devices_per_node
    one_node = next((p for p in case.measured if p.nodes == 1 and p.devices_per_node == d), None)
    if one_node is not None and all(p.efficiency_vs_1node is not None for p in case.published):
        return one_node, "efficiency_vs_1node"
    one_gpu = next(p for p in case.measured if p.nodes * p.devices_per_node == 1)
    return one_gpu, "efficiency_vs_1gpu"


def case_model(
    case: Case, *, sigma_share: float = SIGMA_SHARE, carry: str = "one-time"
) -> StepModel:
    """The step model a case's measured points give (see the module doc), with what it
    leaves of the anchor's step carried as ``carry`` says (:data:`~.step_model.CARRIES`)."""
    d = case.devices_per_node
    b, k = case.per_device_batch, case.grad_accum
    ref, _ = reference(case)
    one_node = next((p for p in case.measured if p.nodes == 1 and p.devices_per_node == d), None)
    one_gpu = next((p for p in case.measured if p.nodes * p.devices_per_node == 1), None)
    t_node = b / (one_node or ref).throughput_per_device
    buckets = tuple(ddp_bucket_bytes(int(case.grad_bytes), int(case.bucket_mb * 1e6)))
    intra_bw = case.intra_busbw_gbps or INTRA_DEFAULT_GBPS
    intra = Level(
        ALPHA_INTRA_S,
        intra_bw,
        2,
        "intra-node: the case's link" if case.intra_busbw_gbps else "intra: assumed",
    )
    multi = [p for p in case.measured if p.nodes > 1]
    if case.inter_busbw_gbps:
        inter = Level(ALPHA_INTER_S, case.inter_busbw_gbps, 2, "inter-node: the case's link")
        band = INTER_BAND
    else:
        inter = Level(ALPHA_INTER_S, intra_bw * UNKNOWN_INTER_SHARE, 2, "inter-node: assumed")
        band = UNKNOWN_INTER_BAND
    net = Network(intra, inter, band, "", measured_nodes=1)
    strong = case.scaling == "strong"
    ref_world = ref.nodes * ref.devices_per_node
    draft = StepModel(
        per_device_batch=b,
        accumulate=k,
        compute_fixed_s=0.0,
        compute_per_sample_s=0.0,
        input_per_sample_s=0.0,
        overlap_s=0.0,
        other_s=0.0,
        sigma_share=sigma_share,
        bucket_bytes=buckets,
        network=net,
        anchor_world=d,
        anchor_nodes=1,
        exposed_offset_s=0.0,
        # the reference's step: under strong scaling it holds the whole node's samples
        baseline_step_s=(b * d / ref_world if strong else b) / ref.throughput_per_device,
        baseline_batch=b * d / ref_world if strong else b,
        baseline_world=ref_world,
        scaling_mode=case.scaling,
        carry=carry,
    )
    if one_gpu is not None:
        compute = b / one_gpu.throughput_per_device
    else:  # the 1-node step less what the model exposes there (fixed point: it hides less
        compute = t_node  # when compute is shorter)
        for _ in range(20):
            trial = replace(draft, compute_per_sample_s=compute / b)
            exposed = trial.modelled_exposed(d, 1, buckets, k, 1.0, b)
            compute = max((t_node - exposed) / (1 + sigma_share * expected_max(d)), 0.1 * t_node)
    model = replace(draft, compute_per_sample_s=compute / b)
    if one_node is None:  # only 1 GPU measured: it is the anchor, nothing to offset
        return replace(model, anchor_world=1, anchor_nodes=1)
    if multi:  # the largest measured multi-node point is the anchor
        top = max(multi, key=lambda p: p.nodes)
        world = top.nodes * top.devices_per_node
        # strong scaling: the anchor's per-device batch is the 1-node one over the ranks,
        # its accumulation shrinking first (the micro-batch kept)
        b_a = b * d / world if strong else b
        k_a = max(1, math.floor(k * d / world + 1e-9)) if strong else k
        net = replace(net, measured_nodes=top.nodes)
        model = replace(
            model,
            per_device_batch=b_a,
            accumulate=k_a,
            network=net,
            anchor_world=world,
            anchor_nodes=top.nodes,
        )
        # what the model leaves of the measured step is carried as `carry` says
        return model.calibrated(math.nan, b_a / top.throughput_per_device)
    # the 1-node point is the anchor: what the model leaves over there is carried
    return model.calibrated(math.nan, t_node)


def _predict(model: StepModel, p: Point, bw: float | None) -> float:
    world = p.nodes * p.devices_per_node
    e, _, _ = model.efficiency(world, p.nodes, bw=bw)
    return e


def centre_carry(case: Case, p: Point) -> tuple[str, float]:
    """The explanation the centre assumes, and its efficiency: of the structural
    alternatives, the middle one at the network band's middle (the others bound it)."""
    got = sorted((_predict(case_model(case, carry=c), p, None), c) for c in CARRIES)
    finite = [(e, c) for e, c in got if math.isfinite(e)]
    if not finite:
        return CARRIES[0], math.nan
    e, c = finite[(len(finite) - 1) // 2]
    return c, e


def prepare(cases: Sequence[Case], draws: int = DRAWS, seed: int = 0) -> list[Scored]:
    """Every published point with its centre and structural draws (see model_error.Scored):
    each draw takes one of the explanations in turn, a straggler spread within 0-2x
    SIGMA_SHARE and an inter-node bandwidth within the band."""
    rng = np.random.default_rng(seed)
    out = []
    for case in cases:
        _, field = reference(case)
        anchor = case_model(case)
        for p in case.published:
            carry, centre = centre_carry(case, p)
            base = np.empty(draws)
            for i in range(draws):
                sigma = float(rng.uniform(0.0, 2 * SIGMA_SHARE))
                m = case_model(case, sigma_share=sigma, carry=CARRIES[i % len(CARRIES)])
                base[i] = _predict(m, p, m.network.factor(p.nodes, float(rng.uniform())))
            d, s = features(
                p.nodes * p.devices_per_node, p.nodes, anchor.anchor_world, anchor.anchor_nodes
            )
            out.append(
                Scored(
                    case=case.name,
                    group=case.group,
                    d=d,
                    s=s,
                    truth=float(getattr(p, field)),
                    centre=centre,
                    base=base,
                    z=rng.standard_normal(draws),
                    z_noise=rng.standard_normal(draws),
                    explanation=carry,
                )
            )
    return out


def backtest(
    cases: Sequence[Case],
    draws: int = DRAWS,
    seed: int = 0,
    error_model: ErrorModel | None = None,
) -> dict[str, Any]:
    """Every published point predicted from its case's measured points, with the shipped
    error model (or ``error_model``)."""
    em = error_model or load_error_model()
    prepared = prepare(cases, draws, seed)
    return _result(cases, prepared, score(prepared, em))


def _result(
    cases: Sequence[Case], prepared: Sequence[Scored], scored: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    i = 0
    for case in cases:
        _, field = reference(case)
        for p in case.published:
            got, prep = scored[i], prepared[i]
            assert got["case"] == case.name and prep.case == case.name
            points.append(
                {
                    "case": case.name,
                    "nodes": p.nodes,
                    "devices_per_node": p.devices_per_node,
                    "published": prep.truth,
                    "against": "1 node" if field == "efficiency_vs_1node" else "1 GPU",
                    "predicted": got["predicted"],
                    "low": got["low"],
                    "high": got["high"],
                    "covered": got["covered"],
                    "centre_assumes": prep.explanation,
                    "group": case.group,
                }
            )
            i += 1
    t = totals(scored)
    return {
        "points": points,
        "totals": {
            "cases": len(cases),
            "points": len(points),
            "coverage": t["coverage"],
            "median_abs_error_pts": t["median_abs_error_pts"],
            "median_width_pts": t["median_width_pts"],
        },
    }


def cross_validated(cases: Sequence[Case], draws: int = DRAWS, seed: int = 0) -> dict[str, Any]:
    """Leave one source out: each source's points with the error model fitted on the
    others' (model_error.cross_validate), in the backtest's layout."""
    prepared = prepare(cases, draws, seed)
    scored = cross_validate(prepared)
    # cross_validate groups the points by source: put them back in the cases' order
    by_key: dict[str, list[dict[str, Any]]] = {}
    for s in scored:
        by_key.setdefault(str(s["case"]), []).append(s)
    ordered = [by_key[c.name].pop(0) for c in cases for _ in c.published]
    return _result(cases, prepared, ordered)
