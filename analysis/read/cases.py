"""Reading the backtest's published cases (format: ``benchmarks/projection_cases.yaml``): per
case, a model's gradient bytes and buckets (FSDP's: its gathered bytes and wrapped blocks),
the hardware's devices per node and link bandwidths, its ``measured`` small-scale throughputs
and its ``published`` larger-scale ones.
What :mod:`analysis.compute.projection.published.scoring` makes of them is its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalescope.errors import yaml_problem

METHODS = {"ddp": "ddp", "horovod": "horovod", "fsdp": "fsdp", "hsdp": "hsdp"}
"""How a case's ``model.method`` names the frameworks whose communication is known (a name
that starts with a key, e.g. ``horovod-allreduce``): DDP's and Horovod's bucket rules, FSDP's
per-block gathers and reduce-scatters (HSDP's within shard groups, with an all-reduce of each
shard across them); any other method is kept as written."""
SHARDED_METHODS = ("fsdp", "hsdp")

FAMILIES = ("vendor-dgx", "cloud-ethernet", "older-gpu-ps-horovod", "fsdp", "university-lab")
"""The kinds of system a case's ``family`` may name: vendor-tuned DGX tables, commodity or
cloud Ethernet/EFA, older GPUs with parameter servers or Horovod, FSDP, a university or
national-lab cluster."""


class CaseError(ValueError):
    """A case that cannot be read; the message names the case and the field."""


@dataclass(frozen=True)
class Point:
    nodes: int
    devices_per_node: int
    throughput_per_device: float
    efficiency_vs_1node: float | None = None
    efficiency_vs_1gpu: float | None = None


GRAD_SYNCS = ("step", "micro-batch", "unknown")
"""What a case's ``grad_sync`` may say (:attr:`Case.grad_sync`)."""


@dataclass(frozen=True)
class Case:
    name: str
    devices_per_node: int
    grad_bytes: float
    bucket_mb: float | None
    """The bucket cap the source sets (DDP's ``bucket_cap_mb``, Horovod's fusion threshold;
    MiB, as the frameworks take it), or None where it sets none: the method's default."""
    scaling: str
    """``weak``, ``strong``, or ``unknown`` where the source does not settle it (a table of
    throughput that prints no global batch): the projection then spans both."""
    per_device_batch: float
    grad_accum: int
    intra_busbw_gbps: float | None
    inter_busbw_gbps: float | None
    measured: tuple[Point, ...]
    published: tuple[Point, ...]
    method: str = ""
    """``ddp``, ``horovod``, another method as written, or '' where the case does not say."""
    wrapped_blocks: int | None = None
    """FSDP: how many blocks the model is wrapped in (``model.wrapped_blocks``; required for
    ``fsdp``), each gathering its share of ``grad_bytes``; None for other methods."""
    reshard_after_forward: bool = True
    """FSDP: whether each block is gathered again before its backward (the default)."""
    shard_size: int | None = None
    """HSDP: the devices of a shard group (``model.shard_size``; a node's where not given);
    None for other methods."""
    group: str = ""
    """The source the case comes from (``source_group``, else its name): cross-validation
    leaves one source out at a time, since cases of one source share its methods."""
    family: str = ""
    """The kind of system (``family``, one of :data:`FAMILIES`), or '' where the case names none."""
    inter_node: str = ""
    """The link between nodes as the source names it (``hardware.inter_node``), '' where not
    given: a source whose cases ran on several links (one cluster's Ethernet and InfiniBand)
    reached a share of each line rate of its own."""
    grad_sync: str = "step"
    """Under accumulation, when gradients are synced (``grad_sync``): ``step`` (once a step,
    on its last micro-batch: DDP's ``no_sync``, Horovod's post-accumulation all-reduce, FSDP's
    gradient sync switched off while accumulating), ``micro-batch`` (on every one), or
    ``unknown`` where the source does not say: the projection then spans both."""


def is_fsdp(case: Case) -> bool:
    """Whether the case shards its model (FSDP, or HSDP in shard groups): scored apart."""
    return case.method in SHARDED_METHODS


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
    """Every case of the file at ``path``; :class:`CaseError` names the first thing wrong."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CaseError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise CaseError(f"{path} is not YAML: {yaml_problem(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise CaseError(f"{path}: expected a mapping with a list 'cases'")
    out = []
    for i, raw in enumerate(data["cases"]):
        if not isinstance(raw, dict):
            raise CaseError(f"{path}: cases[{i}] is not a mapping")
        out.append(_case(str(raw.get("name") or f"cases[{i}]"), raw))
    return out


@dataclass(frozen=True)
class Draw:
    """One draw of the sealed test: ``sources`` drawn with ``seed`` from ``drawn_from``
    (:func:`analysis.compute.projection.published.sealed.draw`)."""

    seed: int
    drawn_from: tuple[str, ...]
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Sealed:
    """The sources a case file sets aside as its sealed test (``sealed:``): the first draw,
    then each later one (``later:``), made over sources added after the draws before it."""

    draws: tuple[Draw, ...]

    @property
    def sources(self) -> tuple[str, ...]:
        """Every sealed source, sorted by name."""
        return tuple(sorted(name for d in self.draws for name in d.sources))

    @property
    def drawn_from(self) -> tuple[str, ...]:
        """Every source some draw was made from (the rest were added after the last)."""
        return tuple(name for d in self.draws for name in d.drawn_from)


def _draw(path: str, raw: Any, where: str) -> Draw:
    """One draw's record, checked: an integer seed and two lists of distinct source names,
    the sealed ones among those drawn from."""
    seed = raw.get("seed") if isinstance(raw, dict) else None
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise CaseError(f"{path}: {where} must be a mapping with an integer seed")
    lists = {}
    for key in ("drawn_from", "sources"):
        value = raw.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise CaseError(f"{path}: {where}.{key} must be a list of source names")
        if len(set(value)) != len(value):
            twice = sorted({v for v in value if value.count(v) > 1})
            raise CaseError(f"{path}: {where}.{key} names a source twice: {', '.join(twice)}")
        lists[key] = tuple(value)
    outside = sorted(set(lists["sources"]) - set(lists["drawn_from"]))
    if outside:
        raise CaseError(
            f"{path}: {where}.sources names source(s) not in its drawn_from: {', '.join(outside)}"
        )
    return Draw(seed, lists["drawn_from"], lists["sources"])


def read_sealed(path: str) -> Sealed | None:
    """The file's ``sealed:`` record, or None where it has none; :class:`CaseError` names
    what is wrong with it and where (a field missing, a source the file does not hold, or
    one drawn from twice)."""
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    raw = data.get("sealed") if isinstance(data, dict) else None
    if raw is None:
        return None
    later = (raw.get("later") or []) if isinstance(raw, dict) else []
    if not isinstance(later, list):
        raise CaseError(f"{path}: sealed.later must be a list of draws")
    records = [("sealed", raw), *((f"sealed.later[{i}]", r) for i, r in enumerate(later))]
    draws = [(at, _draw(path, r, at)) for at, r in records]
    held = {c.group for c in read_cases(path)}
    seen: set[str] = set()
    for at, d in draws:
        missing = sorted(set(d.drawn_from) - held)
        if missing:
            raise CaseError(
                f"{path}: {at}.drawn_from names source(s) the file does not hold: "
                f"{', '.join(missing)}"
            )
        twice = sorted(seen & set(d.drawn_from))
        if twice:
            raise CaseError(f"{path}: {at} draws again from source(s): {', '.join(twice)}")
        seen |= set(d.drawn_from)
    return Sealed(tuple(d for _, d in draws))


def _case(name: str, raw: dict[str, Any]) -> Case:
    """One case, checked field by field."""
    hw, model = raw.get("hardware") or {}, raw.get("model") or {}
    if not isinstance(hw, dict) or not isinstance(model, dict):
        raise CaseError(f"case {name!r}: hardware and model must be mappings")
    measured, published = _points(name, raw, "measured"), _points(name, raw, "published")
    dpn = hw.get("devices_per_node")
    if not isinstance(dpn, int) or dpn < 1:
        raise CaseError(f"case {name!r}: hardware.devices_per_node must be an integer >= 1")
    _check_references(name, dpn, measured, published)
    method = _method(model.get("method"))
    scaling = raw.get("scaling", "weak")
    if scaling not in ("weak", "strong", "unknown"):
        raise CaseError(f"case {name!r}: scaling must be weak, strong or unknown, got {scaling!r}")
    sync = raw.get("grad_sync", "step")
    if sync not in GRAD_SYNCS:
        raise CaseError(
            f"case {name!r}: grad_sync must be step, micro-batch or unknown, got {sync!r}"
        )
    return Case(
        name=name,
        devices_per_node=dpn,
        grad_bytes=_required(name, "model.grad_bytes", model.get("grad_bytes")),
        bucket_mb=_number(name, "model.bucket_mb", model.get("bucket_mb"), optional=True),
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
        method=method,
        wrapped_blocks=_blocks(name, method, model.get("wrapped_blocks")),
        reshard_after_forward=_reshard(name, model.get("reshard_after_forward", True)),
        shard_size=_shard_size(name, method, dpn, model.get("shard_size")),
        group=str(raw.get("source_group") or name),
        family=_family(name, raw.get("family")),
        inter_node=str(hw.get("inter_node") or ""),
        grad_sync=sync,
    )


def _family(name: str, raw: Any) -> str:
    """``family``: optional, one of :data:`FAMILIES`."""
    if raw is None:
        return ""
    if not isinstance(raw, str) or raw not in FAMILIES:
        raise CaseError(f"case {name!r}: family must be one of {', '.join(FAMILIES)}, got {raw!r}")
    return raw


def _blocks(name: str, method: str, raw: Any) -> int | None:
    """``model.wrapped_blocks``: an integer >= 1, required where the method shards (fsdp,
    hsdp)."""
    if raw is None and method not in SHARDED_METHODS:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise CaseError(
            f"case {name!r}: model.wrapped_blocks must be an integer >= 1"
            + (f" for method {method}" if method in SHARDED_METHODS else "")
            + f", got {raw!r}"
        )
    return raw


def _shard_size(name: str, method: str, dpn: int, raw: Any) -> int | None:
    """``model.shard_size``: for method hsdp, the devices of a shard group, an integer >= 1
    that divides ``devices_per_node`` (a group within a node) or is a multiple of it; a
    node's devices where not given. Refused for any other method."""
    if method != "hsdp":
        if raw is not None:
            raise CaseError(f"case {name!r}: model.shard_size is for method hsdp only")
        return None
    size = dpn if raw is None else raw
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise CaseError(f"case {name!r}: model.shard_size must be an integer >= 1, got {raw!r}")
    if dpn % size and size % dpn:
        raise CaseError(
            f"case {name!r}: model.shard_size {size} neither divides nor is a multiple of "
            f"hardware.devices_per_node {dpn}"
        )
    return size


def _reshard(name: str, raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise CaseError(f"case {name!r}: model.reshard_after_forward must be true or false")
    return raw


def _method(raw: Any) -> str:
    """A case's ``model.method``: the framework's short name where its bucket rule is known."""
    text = str(raw or "").strip()
    return next((short for key, short in METHODS.items() if text.startswith(key)), text)


def _points(name: str, raw: dict[str, Any], key: str) -> tuple[Point, ...]:
    """A case's ``measured`` or ``published`` points."""
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
            raise CaseError(f"case {name!r}: {key}[{j}] needs integer nodes and devices_per_node")
        x = _number(name, f"{key}[{j}].throughput_per_device", r.get("throughput_per_device"))
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


def _check_references(
    name: str, dpn: int, measured: tuple[Point, ...], published: tuple[Point, ...]
) -> None:
    """Every published efficiency needs its reference among the measured points: the 1-node
    point for ``efficiency_vs_1node``, 1 GPU for ``efficiency_vs_1gpu``."""
    has_node = any(p.nodes == 1 and p.devices_per_node == dpn for p in measured)
    has_gpu = any(p.nodes * p.devices_per_node == 1 for p in measured)
    if not has_node and not has_gpu:
        raise CaseError(f"case {name!r}: measured needs the 1-node point ({dpn} devices) or 1 GPU")
    for j, p in enumerate(published):
        if (p.efficiency_vs_1node is None and not has_gpu) or (
            p.efficiency_vs_1node is not None and not has_node and p.efficiency_vs_1gpu is None
        ):
            raise CaseError(
                f"case {name!r}: published[{j}]'s efficiency has no measured reference "
                "point (1 node for efficiency_vs_1node, 1 GPU for efficiency_vs_1gpu)"
            )
