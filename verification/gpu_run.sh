#!/usr/bin/env bash
# The GPU session's one command (README, section "GPU kernels"), run from the repository root:
#
#   OUT=gpu_out bash verification/gpu_run.sh            # extra arguments go to verification.gpu
#
# 1. installs the carried pure-Python wheels (gpu_wheels/*.whl: array-api-compat, which the GPU image
#    lacks) into /tmp/ddesys_deps, without any index (zip import of the wheels if pip refuses);
# 2. python -m ddesys.verification.gpu: preflight, correctness, timings; JSON + markdown under $OUT/gpu, written
#    row by row (a timeout keeps what was measured);
# 3. python -m ddesys.experiments.efficiency --device cuda --scale quick, under $OUT/efficiency (CUDA only, and
#    only when the preflight passed).
# Exit status: verification.gpu's (0 pass, 1 a check failed or a section raised, 2 preflight, 124 timeout).
set -u
OUT="${OUT:-gpu_out}"
mkdir -p "$OUT"
if compgen -G "gpu_wheels/*.whl" > /dev/null; then
  if python -m pip install --quiet --no-index --no-deps --target /tmp/ddesys_deps gpu_wheels/*.whl; then
    export PYTHONPATH="/tmp/ddesys_deps${PYTHONPATH:+:$PYTHONPATH}"
  else
    export PYTHONPATH="$(ls gpu_wheels/*.whl | paste -sd: -)${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true) > "$OUT/nvidia-smi.csv" 2>&1
timeout "${CHECK_TIMEOUT:-420}" python -u -m ddesys.verification.gpu --out "$OUT/gpu" "$@" 2>&1 | tee "$OUT/gpu.log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 2 ] && python -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
  timeout "${EFFICIENCY_TIMEOUT:-150}" python -u -m ddesys.experiments.efficiency --device cuda --scale quick --quiet \
    --out "$OUT/efficiency" > "$OUT/efficiency.log" 2>&1
  echo "efficiency: exit $? (log: $OUT/efficiency.log)"; tail -n 12 "$OUT/efficiency.log"
fi
exit "$rc"
