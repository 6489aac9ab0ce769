#!/usr/bin/env bash
# Create .venv (once) and install scalescope into it. Safe to run again.
#   bash scripts/setup.sh          # runtime only
#   bash scripts/setup.sh --dev    # plus the test and lint tools (and Chromium, as root)
# torch: an existing install is kept (a cluster's CUDA build, say). Without one, this
# installs SCALESCOPE_TORCH (default torch==2.13.0; where a local CPU build of it is
# offered, pip takes that one instead of several GB of CUDA packages).
set -euo pipefail
cd "$(dirname "$0")/.."

quiet_pip() {
  # pip warns about every index location of the machine's pip config it cannot use;
  # show everything else it says, and return pip's own status.
  local log rc=0
  log=$(mktemp)
  python -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1 || rc=$?
  grep -v -e "is neither a file nor a directory" -e "^$" "$log" || true
  rm -f "$log"
  return "$rc"
}

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $(${PYTHON:-python3} --version)"
  "${PYTHON:-python3}" -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate

if ! python -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing ${SCALESCOPE_TORCH:-torch==2.13.0}"
  # Word-split on purpose: SCALESCOPE_TORCH may carry pip options, e.g.
  # "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu".
  # shellcheck disable=SC2086
  quiet_pip ${SCALESCOPE_TORCH:-torch==2.13.0}
fi
extra=""
if [ "${1:-}" = "--dev" ]; then
  extra="[dev]"
  # The report.html test loads the page in a real browser: Debian's Chromium, installed once
  # where this can (root with apt-get); elsewhere that one test says why it skips.
  if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's chromium (for the report.html browser test)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi
echo "setup: installing scalescope${extra} and its dependencies (quick when present)"
# uv installs the same packages from the same index in seconds where pip takes about 40 s; the
# torch kept above satisfies the requirement, so neither touches it. pip where uv cannot be
# installed or fails.
if quiet_pip uv >/dev/null 2>&1 &&
  python -m uv pip install -q --python "$(command -v python)" --compile-bytecode -e ".${extra}"; then
  :
else
  echo "setup: installing with pip instead of uv"
  quiet_pip -e ".${extra}"
fi
echo "setup: ready ($(python -c 'from importlib.metadata import version as v
print("torch " + v("torch") + ", lightning " + v("lightning"))'))"
