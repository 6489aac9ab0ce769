#!/bin/bash
# Several nodes (default 2), one task per GPU on each (default 4): DDP across nodes.
#
# Submit from the repository root (settings: slurm_jobs/common.sh):
#   sbatch -p gpu -A myproject -t 01:00:00 --nodes=4 --gpus-per-node=4 \
#     slurm_jobs/multi_node_multi_gpu.sh
#   sbatch --nodes=2 --ntasks-per-node=1 slurm_jobs/multi_node_multi_gpu.sh   # local cluster
# --ntasks-per-node must equal --gpus-per-node (checked before training starts).
#SBATCH --job-name=scalescope-nnodes
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --time=00:30:00
#SBATCH --output=outputs/slurm-%j.out
set -euo pipefail
# sbatch runs a copy of this script from its spool: the repository is the submit dir.
source "${SLURM_SUBMIT_DIR:?submit with sbatch from the repository root}/slurm_jobs/common.sh"
scalescope_job "$@"
