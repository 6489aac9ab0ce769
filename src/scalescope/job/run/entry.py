"""``scalescope train`` / ``python -m scalescope.train``: one job, one result record.

Data flow: validated config -> topology (from the launcher's environment) -> Lightning
Trainer + TimingCallback -> timings agreed by all ranks -> one ResultRecord, printed by
rank 0 behind the record marker and written atomically to the run directory.

:func:`run_training` is the job, step by step: its start (:mod:`.startup`), the record's
identity and the tracking (:mod:`.record_build`, :mod:`.run_tracking`), the module and the
Trainer (:mod:`.trainer_setup`), what measures the training (:mod:`.measure`), the fit and
its end (:mod:`.fitting`), and rank 0's record (:mod:`.record_build`).

torch and lightning are imported inside those steps, so ``--help`` and config errors answer
at once.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ... import record
from ...config import TrainConfig, load_train_config
from ...config.files import parse_overrides
from ...errors import SameOnEveryRankError
from ...procinfo import process_start_unix
from .children import take_over_from_observer
from .fitting import end_run, fit
from .measure import Measures
from .record_build import after_tracking, announce, library_versions, publish, rank_zero_record
from .run_tracking import start_run_tracking
from .startup import plan_job, settle_process
from .trainer_setup import build_module, job_trainer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="train config YAML (default: built-in defaults)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="override config keys, e.g. trainer.max_epochs=3 workload.hidden_sizes=[128,64]",
    )
    parser.add_argument(
        "--env-overrides",
        metavar="VAR",
        help="also apply the key=value pairs (space-separated) of this environment variable, "
        "before the command line's, and name it in errors (the sbatch scripts pass "
        "SCALESCOPE_OVERRIDES)",
    )


def run(args: argparse.Namespace) -> int:
    layers = []
    if args.env_overrides:
        words = os.environ.get(args.env_overrides, "").split()
        layers.append((args.env_overrides, parse_overrides(words)))
    cfg = load_train_config(args.config, args.overrides, layers=layers)
    try:
        run_training(cfg)
    except (KeyboardInterrupt, SameOnEveryRankError):
        # Every rank exits non-zero on purpose (Ctrl-C 130, SIGTERM 143, a check that every
        # rank fails alike 2): rank 0 of a local run ends its child ranks itself, or
        # Lightning's observer, seeing a child's non-zero exit, would SIGKILL this process
        # while it still tears down (see children.py).
        take_over_from_observer()
        raise
    return 0


def run_training(cfg: TrainConfig) -> record.ResultRecord | None:
    """Train ``cfg`` in this process (one rank). Returns the record on rank 0, else None."""
    process_start = process_start_unix()
    job = plan_job(cfg)
    threads = settle_process(cfg.trainer.threads_per_process, job.topo, job.accelerator)
    run_dir, ident = announce(cfg, job, process_start)
    versions = library_versions()
    tracker = start_run_tracking(cfg, job.topo, ident, versions)
    try:
        model, datamodule = build_module(cfg, job)
        measures = Measures.create(cfg, job, model, process_start, tracker, run_dir)
        trainer = job_trainer(cfg, job, run_dir, measures)
        fit(trainer, model, datamodule, measures.stop, measures.timing.t)
        agreed = measures.end_of_training(trainer)
        result = None
        if job.topo.is_rank_zero:
            result = rank_zero_record(
                cfg, job, ident, versions, agreed, measures, trainer, model, datamodule
            )
            result = after_tracking(
                result, tracker, measures, threads=threads, compile_enabled=cfg.trainer.compile
            )
            publish(result, run_dir, job.topo)
        end_run(job.topo, measures.stop, agreed)
        return result
    finally:
        tracker.end()  # no-op when already ended; bounded by tracking.end_timeout_s


def main(argv: Sequence[str] | None = None) -> int:
    from ...cli import main as cli_main

    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
