# The repository's venv, when there is one (SLURM_SUBMIT_DIR is the repository root).
if [ -f "$SLURM_SUBMIT_DIR/.venv/bin/activate" ]; then
  source "$SLURM_SUBMIT_DIR/.venv/bin/activate"
fi
# node1 and node2 are names of this machine that do not resolve: rendezvous on loopback.
export MASTER_ADDR=127.0.0.1
