#!/usr/bin/env bash
# The whole test suite, in tiers (tests/unit, tests/integration, tests/slurm):
#   bash scripts/test.sh             set up (with the test tools), lint, the unit tier (stops at
#                                    the first failure), then the integration tier; beside both,
#                                    the Slurm tier on the local two-node cluster (started here,
#                                    installing Debian's Slurm packages when missing; taken down
#                                    again if started here)
#   bash scripts/test.sh --quick     set up, lint and the unit tier only: no root, no cluster, no
#                                    training
#   bash scripts/test.sh --no-slurm  everything but the Slurm tier, said loudly at start and end
# Other arguments go to every pytest run (e.g. -k name). If the cluster cannot come up, the run
# fails with the reason: the Slurm tier is never skipped silently.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
slurm=1
pytest_args=()
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --no-slurm) slurm=0 ;;
    *) pytest_args+=("$arg") ;;
  esac
done

banner() { printf '\n=== %s ===\n' "$*"; }

bash scripts/setup.sh --dev
# shellcheck disable=SC1091
source .venv/bin/activate

reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
totals() {
  # One closing line over every tier that ran: "tests: N passed, N failed, N skipped".
  python - "$reports" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
t = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    for suite in ET.parse(f).getroot().iter("testsuite"):
        for k in t:
            t[k] += int(suite.get(k, 0))
failed = t["failures"] + t["errors"]
print(f"tests: {t['tests'] - failed - t['skipped']} passed, {failed} failed, {t['skipped']} skipped")
PY
}

# pytest exits 5 when it selects no test: with a -k or -m of the caller's that is an answer
# ("nothing matched here"), without one it is a failure.
no_tests_ok() { [ "$1" = 5 ] && [ "${#pytest_args[@]}" -gt 0 ]; }

banner "lint"
ruff check src analysis tests benchmarks examples
ruff format --check src analysis tests benchmarks examples

slurm_pid=""
slurm_log="$reports/slurm.log"
if [ "$quick" = 0 ] && [ "$slurm" = 1 ]; then
  # The Slurm tier needs the local cluster; one that was already up is left as it is.
  started_cluster=0
  scalescope local-cluster status -q >/dev/null 2>&1 || started_cluster=1
  if ! export_line=$(scalescope local-cluster up -q); then
    echo "test.sh: the local Slurm cluster did not come up (reason above); the Slurm tier" \
      "cannot run. Fix it, or opt out explicitly with --no-slurm." >&2
    exit 1
  fi
  eval "$export_line"
  export SCALESCOPE_REQUIRE_SLURM=1 # the tier's fixture fails, never skips, without a cluster
  cleanup() {
    if [ -n "$slurm_pid" ]; then kill "$slurm_pid" 2>/dev/null || true; fi
    if [ "$started_cluster" = 1 ]; then scalescope local-cluster down || true; fi
    rm -rf "$reports"
  }
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  # Beside the unit and integration tiers: Slurm's jobs mostly wait (a time limit, a
  # requeue, the scheduler), and the other tiers use about one core on average, so they
  # share the machine instead of taking turns. Its output follows the integration tier's;
  # it is stopped (and not counted) if the unit tier fails.
  banner "tests/slurm: started in the background (its output comes after the integration tier's)"
  python -m pytest tests/slurm -q --durations=25 --junitxml="$reports/slurm.xml" \
    "${pytest_args[@]}" >"$slurm_log" 2>&1 &
  slurm_pid=$!
elif [ "$quick" = 0 ]; then
  banner "--no-slurm: the Slurm tier (tests/slurm) is NOT run"
fi

banner "unit tier (in-process; stops at the first failure)"
# In-process, the unit tier spreads over the cores (pytest-xdist, at most 4
# workers); the integration tier below measures time and attribution, so it runs one test
# at a time.
unit_rc=0
python -m pytest tests/unit -x -q -n logical --maxprocesses 4 --durations=25 \
  --junitxml="$reports/unit.xml" \
  "${pytest_args[@]}" || unit_rc=$?
if [ "$unit_rc" != 0 ] && ! no_tests_ok "$unit_rc"; then
  if [ -n "$slurm_pid" ]; then
    kill "$slurm_pid" 2>/dev/null || true
    wait "$slurm_pid" 2>/dev/null || true
    slurm_pid=""
    rm -f "$reports/slurm.xml"
  fi
  totals
  echo "the unit tier failed: integration and Slurm tiers not run"
  exit "$unit_rc"
fi

if [ "$quick" = 1 ]; then
  totals
  echo "quick run: lint and the unit tier only; integration and Slurm tiers not run"
  exit 0
fi

banner "tests/integration"
rc=0
python -m pytest tests/integration -q --durations=25 --junitxml="$reports/integration.xml" \
  "${pytest_args[@]}" || rc=$?
no_tests_ok "$rc" && rc=0

if [ -n "$slurm_pid" ]; then
  banner "tests/slurm"
  slurm_rc=0
  wait "$slurm_pid" || slurm_rc=$?
  slurm_pid=""
  cat "$slurm_log"
  no_tests_ok "$slurm_rc" && slurm_rc=0
  [ "$rc" = 0 ] && rc=$slurm_rc
fi
totals
if [ "$slurm" = 0 ]; then
  echo "not run: the Slurm tier (tests/slurm), by --no-slurm"
fi
exit "$rc"
