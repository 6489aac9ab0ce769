#!/usr/bin/env bash
# One GPU check for a cluster node, in under 5 minutes on one GPU, ending in one table:
#   1. smoke: the NVML sampler on this GPU, CUDA events against the wall clock
#      (benchmarks/gpu_smoke.py);
#   2. the GPU tier: every test marked `gpu`, unit and integration (a 1-GPU sweep over
#      precision and compile, summarized; MFU and NVML in the tables and report.html; the
#      compute split into GPU work and host overhead);
#   3. gpt preset=base, bf16-mixed, eager and compiled, beside a plain PyTorch loop of the
#      same module (benchmarks/gpt_mfu.py);
#   4. the resnet diagnosis: a 1-GPU resnet small run, its breakdown and compute split.
# Run it from the repository root with the project installed (or PYTHONPATH=src:.):
#   bash benchmarks/gpu_check.sh
# It exits non-zero when a test fails or a run does not record what a GPU run records.
# Figures are printed, never asserted.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
out=${OUT:-$(mktemp -d)}
rows="$out/rows.tsv"
: >"$rows"
rc=0
row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$rows"; }

echo "== device"
nvidia-smi -L 2>&1 | head -4
$PY -c "import sys, torch, lightning; print('python', sys.version.split()[0], '| torch', torch.__version__, '| lightning', lightning.__version__, '| cuda', torch.version.cuda, '| nccl', '.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else '-')"

echo "== 1. smoke"
if $PY benchmarks/gpu_smoke.py --seconds 2 >"$out/smoke.log" 2>&1; then
  row smoke passed "$(grep -m1 -o '"status": "[a-z_]*"' "$out/smoke.log" | tr -d '"')"
else
  rc=1
  row smoke FAILED "$(tail -1 "$out/smoke.log")"
fi

echo "== 2. GPU tier"
start=$(date +%s)
if $PY -m pytest tests -m gpu -q -p no:cacheprovider -rs >"$out/gpu_tier.log" 2>&1; then
  row "GPU tier" passed "$(tail -1 "$out/gpu_tier.log") in $(($(date +%s) - start)) s"
else
  rc=1
  row "GPU tier" FAILED "$(tail -1 "$out/gpu_tier.log")"
fi

echo "== 3. gpt base bf16: scalescope beside a plain loop"
if $PY benchmarks/gpt_mfu.py --preset base --batch 16 >"$out/gpt.log" 2>&1; then
  while read -r mode plain ours ratio; do
    row "gpt base $mode" measured "plain $plain, scalescope $ours ($ratio)"
  done < <(grep -E '^(eager|compiled) ' "$out/gpt.log")
else
  rc=1
  row "gpt base" FAILED "$(tail -1 "$out/gpt.log")"
fi
cat "$out/gpt.log"

echo "== 4. resnet small diagnosis"
$PY -m scalescope.train workload.name=resnet workload.preset=small \
  trainer.accelerator=gpu trainer.devices=1 trainer.precision=bf16-mixed trainer.max_epochs=2 \
  trainer.batch_size=256 diagnosis.nvml_interval_s=0.2 tracking.mode=off \
  "output_dir=$out/resnet" >"$out/resnet.log" 2>&1 || rc=1
if line=$($PY benchmarks/gpu_record_check.py "$out/resnet"); then
  row "resnet small" passed "$line"
else
  rc=1
  row "resnet small" FAILED "${line:-$(tail -1 "$out/resnet.log")}"
fi

echo
printf 'check\tresult\tfigures\n' | cat - "$rows" | column -t -s $'\t'
echo "gpu_check: $([ "$rc" = 0 ] && echo passed || echo FAILED)"
exit "$rc"
