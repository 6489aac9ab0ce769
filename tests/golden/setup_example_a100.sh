module purge
module load python/3.11 cuda/12.4 nccl/2.21
source "$HOME/venvs/scalescope/bin/activate"

# NCCL: warnings only; the fabric's interface (see `ip link` on a compute node).
export NCCL_DEBUG=WARN
export NCCL_SOCKET_IFNAME=ib0
export NCCL_IB_DISABLE=0
export NCCL_ASYNC_ERROR_HANDLING=1
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-8}
# Rendezvous: the ranks meet at the job's first node, by the name Slurm gives it. Where the
# compute nodes cannot resolve those names, a multi-node job stops within seconds with a
# line that says so; then name an address they reach, e.g.:
# export MASTER_ADDR=$(hostname -I | awk '{print $1}')
