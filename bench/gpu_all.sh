#!/usr/bin/env bash
# One device call: gpu-test (bench/gpu_check.py) then bench (bench/gemm.py), both summaries last.
#
#   run(command="bash bench/gpu_all.sh", carry=[".whl"], timeout_s=600)
#
# Installs the wheels carried in .whl/ (pydantic for `cypressc build`, nvidia-cutlass for the
# CuTe headers) into /tmp/site when they are not importable.  The bench reuses the kernels that
# gpu_check built (no second nvcc pass).  Logs and JSON go to $OUT (gpu_test.txt, bench.txt,
# gpu_check.json, gpu_check.log, bench_gemm.json).  Override with GPU_TEST_ARGS / BENCH_ARGS, e.g.
#   GPU_TEST_ARGS="--programs gemm,batched_gemm,dual_gemm --mappings all --no-sanitizer" bash bench/gpu_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/cyp_out}
mkdir -p "$OUT"
if ! python3 -c "import pydantic, cutlass_library" 2>/dev/null; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "gpu_all: installing .whl/*.whl failed" >&2; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  else
    echo "gpu_all: pydantic / nvidia-cutlass missing and no .whl/ carried (see /work/.library/device/README.md)" >&2
  fi
fi
export PYTHONUNBUFFERED=1
B=build/gpu_check
GPU_TEST_ARGS=${GPU_TEST_ARGS:---programs gemm --mappings h100 --proto f16}

t0=$(date +%s)
# shellcheck disable=SC2086
timeout 350 python3 bench/gpu_check.py --out $B $GPU_TEST_ARGS 2>&1 | tee "$OUT/gpu_test.txt"
rc1=${PIPESTATUS[0]}
if [ -z "${BENCH_ARGS:-}" ]; then   # time every f16 GEMM gpu_check built (no second nvcc pass)
  BENCH_ARGS="--mapping="
  for d in $B/gemm-* $B/proto-f16; do [ -f "$d/libgemm.so" ] && BENCH_ARGS="$BENCH_ARGS --build $d"; done
fi
# shellcheck disable=SC2086
timeout $((570 - ($(date +%s) - t0))) python3 bench/gemm.py $BENCH_ARGS 2>&1 | tee "$OUT/bench.txt"
rc2=${PIPESTATUS[0]}

echo
echo "==================== summaries ($(( $(date +%s) - t0 ))s)"
sed -n '/== gpu_check summary/,$p' "$OUT/gpu_test.txt"
sed -n '/^## GEMM/,$p' "$OUT/bench.txt"
echo "gpu-test rc=$rc1 (124 = timed out)   bench rc=$rc2"
[ "$rc1" = 0 ] && [ "$rc2" = 0 ]
