#!/usr/bin/env bash
# One device call for clusters with TMA multicast (issue #39): gpu_check (compute-sanitizer)
# of the cluster mappings under tests/mappings/cluster/, the same programs' h100 mappings
# without clusters (no sanitizer: the baselines), then the GEMM and FP8 benches over both in
# one process each, so every cluster kernel is timed beside its unclustered twin.
#   run(command="bash bench/cluster_gpu.sh", carry=[".whl"], timeout_s=600)
# STEPS (default "check base bench fp8"), GEMM_SHAPES, FP8_SHAPES, SAN ("" = --no-sanitizer).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/device_env.sh
source bench/device_env.sh
B=build/gpu_check
C=tests/mappings/cluster
STEPS=${STEPS:-check base bench fp8}
SAN=${SAN-}
t0=$(date +%s)
rc=0
if [[ " $STEPS " == *" check "* ]]; then
  python3 bench/gpu_check.py --out $B --jobs 8 $SAN --programs gemm --dtypes f16 \
    --mappings $C/gemm_c2x1.yaml,$C/gemm_c1x2.yaml,$C/gemm_c2x2.yaml,$C/gemm_c2x1_flat.yaml 2>&1 | tee "$OUT/check_gemm.txt" || rc=1
  python3 bench/gpu_check.py --out $B --jobs 8 $SAN --programs gemm_fp8 --dtypes bf16 \
    --mappings $C/gemm_fp8_c2x1.yaml,$C/gemm_fp8_c1x2.yaml 2>&1 | tee "$OUT/check_fp8.txt" || rc=1
  python3 bench/gpu_check.py --out $B --jobs 8 $SAN --programs gemm_fp8_blockwise --dtypes bf16 \
    --mappings $C/gemm_fp8_blockwise_c1x2.yaml 2>&1 | tee "$OUT/check_blockwise.txt" || rc=1
fi
if [[ " $STEPS " == *" base "* ]]; then
  python3 bench/gpu_check.py --out $B --jobs 8 --no-sanitizer --programs gemm --dtypes f16 --mappings h100 2>&1 | tail -5
  python3 bench/gpu_check.py --out $B --jobs 8 --no-sanitizer --programs gemm_fp8 --dtypes bf16 --mappings h100 2>&1 | tail -5
fi
echo "== checks done at $(( $(date +%s) - t0 ))s"
if [[ " $STEPS " == *" bench "* ]]; then
  CMD=""
  for d in $B/gemm-*; do [ -f "$d/libgemm.so" ] && CMD="$CMD --build $d"; done
  # shellcheck disable=SC2086
  timeout $((560 - ($(date +%s) - t0))) python3 bench/gemm.py --mapping= $CMD --no-triton \
    --shapes "${GEMM_SHAPES:-4096,8192,4096x7168x16384,16384}" 2>&1 | tee "$OUT/bench.txt"
fi
if [[ " $STEPS " == *" fp8 "* ]]; then
  CMD=""
  for d in $B/gemm_fp8-*; do ls "$d"/lib*.so >/dev/null 2>&1 && CMD="$CMD --build $d"; done
  # shellcheck disable=SC2086
  timeout $((590 - ($(date +%s) - t0))) python3 bench/fp8.py $CMD ${FP8_SHAPES:+--shapes $FP8_SHAPES} 2>&1 | tee "$OUT/fp8.txt"
fi
echo
echo "==================== summaries ($(( $(date +%s) - t0 ))s)"
for f in check_gemm check_fp8 check_blockwise; do [ -f "$OUT/$f.txt" ] && sed -n '/== gpu_check summary/,$p' "$OUT/$f.txt"; done
[ -f "$OUT/bench.txt" ] && sed -n '/^## GEMM/,$p' "$OUT/bench.txt"
[ -f "$OUT/fp8.txt" ] && sed -n '/^| M x N x K/,$p' "$OUT/fp8.txt"
exit $rc
