"""What a profiler trace says: its top operations, and which of them are communication.

Reads the Chrome trace ``torch.profiler`` exports (``export_chrome_trace``: a JSON object whose
``traceEvents`` are complete events, ``ph: "X"``, with a category, a name, a start and a
duration in microseconds), the file Perfetto and Holistic Trace Analysis open. Nothing here
imports torch: the job summarises the trace it just wrote, the analysis names its operations,
a test reads a recorded one.

* **Where the time is counted.** On a GPU run, the device: every kernel, copy and memset
  (``kernel``, ``gpu_memcpy``, ``gpu_memset``), each kernel's time its own (kernels do not
  nest). Without device events, the CPU: operators and annotations (``cpu_op``,
  ``user_annotation``) by *self* time, their duration less that of the events nested inside
  them on the same thread, so that a ``DistributedDataParallel.forward`` does not outrank
  the matmuls it calls. The profiler's own ``ProfilerStep#N`` markers count nothing; they
  say which steps the trace holds. Times add up over threads, as the profiler's own
  ``key_averages()`` does: a gloo collective shows both as ``c10d::allreduce_`` on the
  training thread and as ``gloo:all_reduce`` on gloo's, and both count.
* **The collectives' kernels against the rest** (:func:`collective_kernels`): how long a
  collective's kernel ran, and how much of that no other kernel ran beside it, from the
  kernels' own start and end on the device.
* **Communication**, whatever the backend calls it: NCCL's kernels (``ncclDevKernel_*`` in
  NCCL 2.19 and later, ``ncclKernel_*`` before, the name Holistic Trace Analysis still
  expects), the ``nccl:*`` and ``gloo:*`` annotations, c10d's operators (``c10d::allreduce_``)
  and the profiler's ``record_param_comms``.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
STEP_MARK = re.compile(r"^ProfilerStep#(\d+)$")
COMMUNICATION = re.compile(
    r"^(?:void )?(?:nccl(?:Dev)?Kernel_|nccl:|gloo:|c10d::|record_param_comms\b)",
    re.IGNORECASE,
)
TOP_N = 10
OPERATIONS = (
    ("all_gather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    ("all_reduce", re.compile(r"all_?reduce", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast", re.IGNORECASE)),
)
"""A collective kernel's operation, from its name (``ncclDevKernel_AllGather_RING_LL(...)``,
``ncclKernel_ReduceScatter_...``): the :mod:`scalescope.collectives` operations."""


def operation_of(name: str) -> str:
    """The operation of a collective kernel's ``name`` ("other" where none is named)."""
    return next((op for op, pattern in OPERATIONS if pattern.search(name)), "other")


def is_communication(name: str) -> bool:
    """True for a collective's kernel or operator, NCCL's or gloo's, old names and new."""
    return COMMUNICATION.match(name.strip()) is not None


def read_trace(path: str | Path) -> dict[str, Any]:
    """A trace file as the profiler wrote it (``.json``, or ``.json.gz``)."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{p}: not a Chrome trace (no traceEvents list)")
    return doc


def _complete(events: Iterable[Any]) -> list[Mapping[str, Any]]:
    return [
        e
        for e in events
        if isinstance(e, Mapping)
        and e.get("ph") == "X"
        and isinstance(e.get("dur"), (int, float))
        and isinstance(e.get("ts"), (int, float))
    ]


def profiled_steps(trace: Mapping[str, Any]) -> list[int]:
    """The step numbers of the trace's ``ProfilerStep#N`` markers, in order."""
    found = set()
    for e in _complete(trace.get("traceEvents", [])):
        m = STEP_MARK.match(str(e.get("name", "")))
        if m:
            found.add(int(m.group(1)))
    return sorted(found)


def _self_times(events: list[Mapping[str, Any]]) -> list[tuple[str, float]]:
    """(name, self microseconds) of host events: each one's duration less its children's
    on the same thread (events sorted by start, longest first among equal starts)."""
    by_thread: dict[tuple[Any, Any], list[Mapping[str, Any]]] = defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out: list[tuple[str, float]] = []
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list[Any]] = []  # [end, name, self]
        for e in thread:
            start, dur = float(e["ts"]), float(e["dur"])
            while stack and stack[-1][0] <= start:
                _, name, own = stack.pop()
                out.append((name, own))
            if stack:
                stack[-1][2] -= min(dur, stack[-1][0] - start)
            stack.append([start + dur, str(e["name"]), dur])
        out.extend((name, own) for _, name, own in stack)
    return out


def top_operations(trace: Mapping[str, Any], n: int = TOP_N) -> dict[str, Any]:
    """The ``n`` operations with the most time, on the device where the trace has device
    events, else by self time on the CPU; communication labelled.

    ``{"on": "device"|"cpu", "total_s", "communication_s", "steps": [...], "ops": [{"name",
    "self_s", "share", "calls", "communication"}]}``; shares are of ``total_s``."""
    events = _complete(trace.get("traceEvents", []))
    device = [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    if device:
        on, timed = "device", [(str(e["name"]), float(e["dur"])) for e in device]
    else:
        host = [
            e
            for e in events
            if e.get("cat") in HOST_CATEGORIES and not STEP_MARK.match(str(e.get("name", "")))
        ]
        on, timed = "cpu", _self_times(host)
    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for name, us in timed:
        totals[name] += us
        calls[name] += 1
    total = sum(totals.values())
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
    comm = sum(us for name, us in totals.items() if is_communication(name))
    return {
        "on": on,
        "total_s": total / 1e6,
        "communication_s": comm / 1e6,
        "steps": profiled_steps(trace),
        "ops": [
            {
                "name": name,
                "self_s": us / 1e6,
                "share": us / total if total else 0.0,
                "calls": calls[name],
                "communication": is_communication(name),
            }
            for name, us in ranked[:n]
        ],
    }


def short_name(name: str, width: int = 60) -> str:
    """A kernel's name without its argument list and template clutter, to ``width``."""
    text = name.strip().removeprefix("void ")
    call = re.search(r"[^\s(]\(", text)  # "kernel(args...)", not "Memcpy HtoD (Pinned...)"
    if call:
        text = text[: call.start() + 1]
    return text if len(text) <= width else text[: width - 1] + "…"


def _merged(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intervals (start, end) merged where they overlap or touch, in order."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two merged interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def collective_kernels(trace: Mapping[str, Any]) -> dict[str, Any]:
    """The device time of the trace's collective kernels against its other kernels.

    ``{"kernels": n, "collective_kernels": m, "kernel_s": ..., "alone_s": ...,
    "by_operation": {op: {"calls": ..., "alone_s": ...}}}``: ``kernel_s`` is the time some
    collective's kernel ran (their union: kernels of several buckets one after another on the
    communication stream count once), ``alone_s`` the part of it in which no other kernel
    ran; ``by_operation`` the same lone time per operation (:func:`operation_of`), with its
    launches, so that a step whose passes run different collectives (FSDP gathers on every
    micro-batch, reduce-scatters on the synced one) can count each. A GPU's utilisation
    counts a moment once whatever runs, so utilisation less ``alone_s`` is the time the other
    kernels ran. Copies and memsets are not kernels and count for neither (NVML's utilisation
    counts kernels)."""
    kernels = [e for e in _complete(trace.get("traceEvents", [])) if e.get("cat") == "kernel"]
    comm: list[tuple[float, float]] = []
    other: list[tuple[float, float]] = []
    by_op: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in kernels:
        span = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        name = str(e.get("name", ""))
        (comm if is_communication(name) else other).append(span)
        if is_communication(name):
            by_op[operation_of(name)].append(span)
    comm_union, other_union = _merged(comm), _merged(other)
    kernel_us = sum(end - start for start, end in comm_union)

    def alone_us(spans: list[tuple[float, float]]) -> float:
        union = _merged(spans)
        return sum(end - start for start, end in union) - _overlap(union, other_union)

    return {
        "kernels": len(kernels),
        "collective_kernels": len(comm),
        "kernel_s": kernel_us / 1e6,
        "alone_s": (kernel_us - _overlap(comm_union, other_union)) / 1e6,
        # per operation: its kernels' launches and the time they ran with no compute kernel
        "by_operation": {
            op: {"calls": len(spans), "alone_s": alone_us(spans) / 1e6}
            for op, spans in sorted(by_op.items())
        },
    }
