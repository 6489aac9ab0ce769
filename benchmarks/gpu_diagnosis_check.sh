#!/usr/bin/env bash
# The diagnosis on a GPU node, in one short run (about 3 minutes on one GPU):
#   1. the unit tier on a machine with a GPU (nothing may fail because one is there), with the
#      GPU-marked tests: CUDA events adding intervals into their step's slot, the NVML sampler;
#   2. a 1-GPU run of the batch-norm resnet (bf16-mixed), its record's clock and breakdown read
#      back: the CUDA-event clock, steps counted, compute and input per step.
# Run it on a GPU node from the repository root with the project installed (or with
# PYTHONPATH=src:.): `bash benchmarks/gpu_diagnosis_check.sh`. It exits non-zero when a test
# fails or the record is not what a GPU run records. Timings are printed, never asserted.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
out=${OUT:-$(mktemp -d)}
rc=0

echo "== device"
nvidia-smi -L 2>&1 | head -4
$PY -c "import sys, torch, lightning; print('python', sys.version.split()[0], '| torch', torch.__version__, '| lightning', lightning.__version__, '| cuda', torch.version.cuda, '| nccl', '.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else '-')"

echo "== unit tier (GPU-marked tests included)"
start=$(date +%s)
$PY -m pytest tests/unit -q -p no:cacheprovider -x -n 8 2>/dev/null >"$out/unit.log" ||
  $PY -m pytest tests/unit -q -p no:cacheprovider -x >"$out/unit.log" 2>&1 || rc=1
tail -3 "$out/unit.log"
echo "unit tier: $(( $(date +%s) - start )) s"
$PY -m pytest tests/unit -q -p no:cacheprovider -m gpu -rA 2>&1 | grep -E "PASSED|FAILED|SKIPPED|passed|failed" | tail -6

echo "== 1-GPU resnet (batch norm), bf16-mixed"
$PY -m scalescope.train workload.name=resnet workload.preset=tiny workload.norm=batch \
  workload.train_samples=65536 trainer.accelerator=gpu trainer.devices=1 \
  trainer.precision=bf16-mixed trainer.max_epochs=2 trainer.batch_size=128 \
  diagnosis.nvml_interval_s=0.2 tracking.mode=off "output_dir=$out/run" >"$out/train.log" 2>&1 ||
  rc=1
tail -1 "$out/train.log"
$PY - "$out/run" <<'PY' || rc=1
import json, pathlib, sys
(path,) = pathlib.Path(sys.argv[1]).rglob("result.json")
r = json.loads(path.read_text())
d = r["diagnosis"]
(rank,) = d["ranks"]
print(f"record: clock={d['clock']} steady_steps={d['steady_steps']} "
      f"step {1e3 * rank['step_time_s']:.2f} ms = input {1e3 * rank['input_wait_s']:.2f} + "
      f"compute {1e3 * rank['compute_s']:.2f} + comm {1e3 * rank['comm_wait_s']:.2f} ms; "
      f"peak {rank['peak_mem_gib']} GiB; nvml {d['nvml']['status']}")
ok = d["status"] == "recorded" and d["clock"] == "cuda_events" and rank["comm_wait_s"] == 0.0
sys.exit(0 if ok else 1)
PY
echo "gpu_diagnosis_check: $([ "$rc" = 0 ] && echo passed || echo FAILED)"
exit "$rc"
