"""``scalescope bench-data``: the input pipeline alone, against the step it feeds.

Command-line layer of :mod:`.bench`: parses the grid, shows a live progress display,
prints the table and writes ``bench-data.csv`` and ``bench-data.json`` atomically.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...atomic import write_text_atomic
from ...config import TrainConfig, load_train_config
from ...errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from .bench import LoaderRow


def _int_list(flag: str) -> Any:
    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag}: expected integers like 0,2,4, got {text!r}"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(f"{flag}: empty list")
        return values

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", required=True, help="train config YAML")
    parser.add_argument(
        "--workers", type=_int_list("--workers"), default=[0, 2, 4, 8], help="default 0,2,4,8"
    )
    parser.add_argument(
        "--prefetch",
        type=_int_list("--prefetch"),
        default=[2, 4],
        help="prefetch_factor values (with workers only); default 2,4",
    )
    parser.add_argument(
        "--batch-size",
        type=_int_list("--batch-size"),
        default=None,
        help="per-rank batch sizes (default: the config's trainer.batch_size)",
    )
    parser.add_argument(
        "--batches", type=int, default=50, help="batches timed per setting (default 50)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="folder for bench-data.csv/.json (default <output_dir>/bench-data/<UTC time>)",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="config overrides, as for train"
    )


def _out_dir(args: argparse.Namespace, output_dir: str) -> Path:
    if args.out:
        return Path(args.out)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = Path(output_dir) / "bench-data" / stamp
    candidate, n = base, 1
    while candidate.exists():  # never overwrite an earlier run's results
        n += 1
        candidate = base.with_name(f"{stamp}-{n}")
    return candidate


def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _fmt(v: float, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if unit == "ms":
        return f"{v * 1e3:,.1f}"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.2f}"


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    cfg = load_train_config(args.config, args.overrides)
    batch_sizes = _check_grid(args, cfg)
    out = _out_dir(args, cfg.output_dir)

    console = Console(highlight=False)
    if not console.is_terminal:  # logs and pipes: wide enough for the whole table
        console = Console(highlight=False, width=160)
    rows, context = _bench_with_progress(console, cfg, args, batch_sizes)
    console.print(_table(cfg, context, args.batches, rows))
    dicts = [r.to_dict() for r in rows]
    write_text_atomic(out / "bench-data.csv", to_csv(dicts))
    write_text_atomic(
        out / "bench-data.json",
        json.dumps({**context, "batches": args.batches, "rows": dicts}, indent=1) + "\n",
    )
    console.print(f"wrote {out / 'bench-data.csv'} and {out / 'bench-data.json'}", markup=False)
    return 0


def _check_grid(args: argparse.Namespace, cfg: TrainConfig) -> list[int]:
    """Refuse a workload without a loader and settings out of range, before torch is
    imported; returns the batch sizes to time."""
    from . import bench as loader_bench

    loader_bench.check_benchable(cfg)  # before torch is imported
    if any(w < 0 for w in args.workers):
        raise ConfigError(f"--workers: must be >= 0, got {args.workers}")
    if any(p <= 0 for p in args.prefetch):
        raise ConfigError(f"--prefetch: must be > 0, got {args.prefetch}")
    batch_sizes: list[int] = args.batch_size or [cfg.trainer.batch_size]
    if any(b <= 0 for b in batch_sizes):
        raise ConfigError(f"--batch-size: must be > 0, got {batch_sizes}")
    return batch_sizes


def _bench_with_progress(
    console: Console, cfg: TrainConfig, args: argparse.Namespace, batch_sizes: list[int]
) -> tuple[list[LoaderRow], dict[str, Any]]:
    """:func:`~scalescope.job.loader_bench.bench` under a live progress bar per setting."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from . import bench as loader_bench

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
    )

    def track(label: str) -> loader_bench.Progress:
        task = progress.add_task(label, total=None)

        def update(_what: str, done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return update

    with progress:
        return loader_bench.bench(
            cfg,
            workers=args.workers,
            prefetch=args.prefetch,
            batch_sizes=batch_sizes,
            batches=args.batches,
            progress=track,
        )


_COLUMNS = (
    "workers",
    "prefetch",
    "batch",
    "loader samples/s",
    "first batch ms",
    "p50 ms",
    "p95 ms",
    "loader CPU cores",
    "step samples/s",
    "keeps up",
)


def _table(cfg: TrainConfig, context: dict[str, Any], batches: int, rows: list[LoaderRow]) -> Table:
    from rich.table import Table

    # no rules and two spaces between columns: the ten columns fit 120 columns unwrapped
    table = Table(
        title=f"input pipeline of {cfg.workload_name} ({cfg.name}) on {context['device']}, "
        f"{batches} batches per setting",
        title_justify="left",
        box=None,
        pad_edge=False,
        header_style="bold",
    )
    for col in _COLUMNS:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r.workers),
            str(r.prefetch_factor) if r.prefetch_factor is not None else "-",
            str(r.batch_size),
            _fmt(r.samples_per_s),
            _fmt(r.time_to_first_batch_s, "ms"),
            _fmt(r.batch_p50_s, "ms"),
            _fmt(r.batch_p95_s, "ms"),
            f"{r.loader_cpu_cores:.2f}",
            _fmt(r.step_samples_per_s),
            "[green]yes[/green]" if r.keeps_up else "[red]no[/red]",
        )
    return table
