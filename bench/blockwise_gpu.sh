#!/usr/bin/env bash
# One device call for the block-scaled FP8 GEMM (issue #39): gpu_check (compute-sanitizer) of
# programs/gemm_fp8_blockwise.cyp under its mappings, mapping variants without the sanitizer,
# then bench/fp8.py over all of them, gemm_fp8 (per-tensor) and the build in build/old/ (the
# previous commit's kernel, carried as CUDA source: bench/NOTES.md says which) in one process.
#   run(command="bash bench/blockwise_gpu.sh", carry=[".whl", "build/old"], timeout_s=600)
# STEPS (default "check variants bench"), FP8_SHAPES, SAN ("" = sanitizers on).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/device_env.sh
source bench/device_env.sh
B=build/gpu_check
V=build/variants
STEPS=${STEPS:-check variants bench}
SAN=${SAN-}
t0=$(date +%s)
rc=0
if [[ " $STEPS " == *" check "* ]]; then
  python3 bench/gpu_check.py --out $B --jobs 8 $SAN --programs gemm_fp8_blockwise --dtypes bf16 \
    --mappings h100,tests/mappings/gemm_fp8_blockwise_overlap.yaml,tests/mappings/cluster/gemm_fp8_blockwise_c1x2.yaml \
    2>&1 | tee "$OUT/check_blockwise.txt" || rc=1
fi
if [[ " $STEPS " == *" variants "* ]]; then
  mkdir -p $V
  m=mappings/gemm_fp8_blockwise/h100.yaml
  sed 's/    pipeline: 4/    pipeline: 5/' $m > $V/bw_p5.yaml
  sed 's/    pipeline: 4/    pipeline: 5/; s/    raster: 16/    raster: 8/' $m > $V/bw_p5_r8.yaml
  python3 bench/gpu_check.py --out $B --jobs 8 --no-sanitizer --programs gemm_fp8_blockwise --dtypes bf16 \
    --mappings $V/bw_p5.yaml,$V/bw_p5_r8.yaml 2>&1 | tail -4
  python3 bench/gpu_check.py --out $B --jobs 8 --no-sanitizer --programs gemm_fp8 --dtypes bf16 --mappings h100 2>&1 | tail -3
  for d in build/old/*/; do
    make -s -C "$d" RUNTIME_INCLUDE="$PWD/cypressc/backend/runtime" >/dev/null 2>&1 || echo "old build $d failed"
  done
fi
echo "== checks done at $(( $(date +%s) - t0 ))s"
if [[ " $STEPS " == *" bench "* ]]; then
  CMD=""
  for d in $B/gemm_fp8_blockwise-* $B/gemm_fp8-*h100* build/old/*; do
    ls "$d"/lib*.so >/dev/null 2>&1 && CMD="$CMD --build $d"
  done
  # shellcheck disable=SC2086
  timeout $((590 - ($(date +%s) - t0))) python3 bench/fp8.py $CMD \
    --shapes "${FP8_SHAPES:-4096x7168x16384,4096x2112x7168,4096x24576x1536,4096}" 2>&1 | tee "$OUT/fp8.txt"
fi
echo
echo "==================== summaries ($(( $(date +%s) - t0 ))s)"
[ -f "$OUT/check_blockwise.txt" ] && sed -n '/== gpu_check summary/,$p' "$OUT/check_blockwise.txt"
[ -f "$OUT/fp8.txt" ] && sed -n '/^| M x N x K/,$p' "$OUT/fp8.txt"
exit $rc
