#!/usr/bin/env bash
# The main job on one machine: set up, run a local scaling sweep of a compute-bound
# workload (gpt: 1 and 2 processes, 3 repetitions each), then summarise it into tables,
# charts and report.md. The tutorial's spiral MLP has its own sweep: configs/sweeps/local.yaml.
# Extra arguments go to `scalescope sweep` (e.g. --repeats 5).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
source .venv/bin/activate
scalescope sweep --config configs/sweeps/quickstart.yaml --executor local --wait "$@"
