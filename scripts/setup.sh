#!/usr/bin/env bash
# Create .venv (once) and install scalescope into it. Safe to run again.
#   bash scripts/setup.sh          # runtime only
#   bash scripts/setup.sh --dev    # plus the test and lint tools
# torch: an existing install is kept (a cluster's CUDA build, say). Without one, this
# installs SCALESCOPE_TORCH (default torch==2.13.0; where a local CPU build of it is
# offered, pip takes that one instead of several GB of CUDA packages).
set -euo pipefail
cd "$(dirname "$0")/.."

quiet_pip() {
  # pip warns about every index location of the machine's pip config it cannot use;
  # keep the output to what matters.
  python -m pip install -q --disable-pip-version-check "$@" 2>&1 \
    | grep -v -e "is neither a file nor a directory" -e "^$" || true
  return "${PIPESTATUS[0]}"
}

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $(${PYTHON:-python3} --version)"
  "${PYTHON:-python3}" -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate

if ! python -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing ${SCALESCOPE_TORCH:-torch==2.13.0}"
  quiet_pip "${SCALESCOPE_TORCH:-torch==2.13.0}"
fi
extra=""
[ "${1:-}" = "--dev" ] && extra="[dev]"
if ! python -c "import scalescope, analysis, lightning, comet_ml, submitit, pandas, matplotlib, rich" >/dev/null 2>&1 \
   || [ -n "$extra" ] && ! python -c "import pytest, hypothesis, ruff" >/dev/null 2>&1; then
  echo "setup: installing scalescope${extra} and its dependencies"
fi
quiet_pip -e ".${extra}"
echo "setup: ready ($(python -c 'import torch, lightning; print(f"torch {torch.__version__}, lightning {lightning.__version__}")'))"
