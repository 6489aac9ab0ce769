#!/usr/bin/env bash
# Everything: set up with the test tools, lint, bring up the local two-node Slurm cluster
# (installs Debian's Slurm packages when missing), run the whole test suite, take the
# cluster down again. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
# shellcheck disable=SC1091
source .venv/bin/activate

ruff check src analysis tests benchmarks examples
ruff format --check src analysis tests benchmarks examples

# The Slurm integration tests need the local cluster; leave one that was already up as is.
started_cluster=0
scalescope local-cluster status -q >/dev/null 2>&1 || started_cluster=1
eval "$(scalescope local-cluster up -q)"
cleanup() { if [ "$started_cluster" = 1 ]; then scalescope local-cluster down || true; fi; }
trap cleanup EXIT

python -m pytest -q "$@"
