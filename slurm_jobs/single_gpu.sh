#!/bin/bash
# One task on one node: the baseline of a scaling sweep (one GPU, or one CPU process).
#
# Submit from the repository root (settings: slurm_jobs/common.sh):
#   sbatch slurm_jobs/single_gpu.sh                                  # local cluster, CPU
#   sbatch -p gpu -A myproject -t 01:00:00 --gpus-per-node=1 slurm_jobs/single_gpu.sh
#   SCALESCOPE_CLUSTER=configs/clusters/example_a100.yaml \
#     SCALESCOPE_OVERRIDES="trainer.max_epochs=3" sbatch --gpus-per-node=1 slurm_jobs/single_gpu.sh
#SBATCH --job-name=scalescope-1gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --output=outputs/slurm-%j.out
set -euo pipefail
# sbatch runs a copy of this script from its spool: the repository is the submit dir.
source "${SLURM_SUBMIT_DIR:?submit with sbatch from the repository root}/slurm_jobs/common.sh"
scalescope_job "$@"
