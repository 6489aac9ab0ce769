#!/usr/bin/env bash
# The main job on one machine: set up, run a local scaling sweep (1 and 2 processes,
# 3 repetitions each), then summarise it into tables, charts and report.md.
# Extra arguments go to `scalescope sweep` (e.g. --repeats 5).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
source .venv/bin/activate
scalescope sweep --config configs/sweeps/local.yaml --executor local --wait "$@"
