#!/bin/bash
# One node, one task per GPU (default 4): DDP inside a node.
#
# Submit from the repository root (settings: slurm_jobs/common.sh):
#   sbatch -p gpu -A myproject -t 01:00:00 --gpus-per-node=4 slurm_jobs/multi_gpu_single_node.sh
#   sbatch --ntasks-per-node=2 slurm_jobs/multi_gpu_single_node.sh   # local cluster: 2 CPU tasks
# --ntasks-per-node must equal --gpus-per-node (checked before training starts).
#SBATCH --job-name=scalescope-1node
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=00:30:00
#SBATCH --output=outputs/slurm-%j.out
set -euo pipefail
# sbatch runs a copy of this script from its spool: the repository is the submit dir.
source "${SLURM_SUBMIT_DIR:?submit with sbatch from the repository root}/slurm_jobs/common.sh"
scalescope_job "$@"
