#!/usr/bin/env bash
# One device call: gpu-test (bench/gpu_check.py), bench (bench/gemm.py) and/or the GEMM-variant
# bench (bench/variants.py), as STEPS says (default "check bench"); the summaries last.
#
#   run(command="bash bench/gpu_all.sh", carry=[".whl"], timeout_s=600)
#
# Installs the wheels carried in .whl/ (pydantic for `cypressc build`, nvidia-cutlass for the
# CuTe headers) into /tmp/site when they are not importable.  The bench reuses the kernels that
# gpu_check built (no second nvcc pass).  Logs and JSON go to $OUT (gpu_test.txt, bench.txt,
# gpu_check.json, gpu_check.log, bench_gemm.json).  Override with GPU_TEST_ARGS / BENCH_ARGS, e.g.
#   GPU_TEST_ARGS="--programs gemm,batched_gemm,dual_gemm --mappings all --no-sanitizer" bash bench/gpu_all.sh
#   STEPS="check variants" GPU_TEST_ARGS="--programs dual_gemm --dtypes f16,bf16" bash bench/gpu_all.sh
#   STEPS=tune bash bench/gpu_all.sh      # bench/tune_gpu.py; TUNE_ARGS="--programs gemm --sizes 4096"
#   STEPS=oldnew bash bench/gpu_all.sh    # bench/old_new.py; carry build/old build/new from bench/old_kernels.sh;
#                                         # OLDNEW_ARGS="--targets=gemm-h100*,dual_gemm-* --sizes 4096"
#   STEPS="check epilogue" GPU_TEST_ARGS="--programs gemm,gemm_epilogue --mappings h100 --no-sanitizer" bash bench/gpu_all.sh
#                                         # bench/epilogue.py (issue #14) on every gemm_epilogue-* (--build) and gemm-*
#                                         # (--gemm-build) gpu_check built; or EPILOGUE_ARGS="--build DIR --sizes 4096"
#   STEPS="check fp8" GPU_TEST_ARGS="--programs gemm_fp8 --dtypes bf16" bash bench/gpu_all.sh
#                                         # bench/fp8.py (issue #39) on every gemm_fp8-* gpu_check built (or FP8_BUILDS)
#   STEPS=attention ATTN_BUILDS="build/fa64 build/fa128:128" bash bench/gpu_all.sh
#                                         # bench/attention.py (issues #11, #12) on those flash_attention2/3 builds (DIR
#                                         # or DIR:D); without ATTN_BUILDS every flash_attention[23]-* gpu_check built, else
#                                         # it builds ATTN_MAPPINGS (default h100_d64_pp_staged_persistent,h100_d128_pp_staged_persistent) itself; extra options
#                                         # in ATTN_ARGS, e.g. ATTN_ARGS="--seqs 4096,16384 --causal 1 --gqa 4"
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/cyp_out}
mkdir -p "$OUT"
if ! python3 -c "import pydantic, cutlass_library, z3" 2>/dev/null; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "gpu_all: installing .whl/*.whl failed" >&2; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  else
    echo "gpu_all: pydantic / nvidia-cutlass missing and no .whl/ carried (see /work/.library/device/README.md)" >&2
  fi
fi
export PYTHONUNBUFFERED=1
B=${GPU_CHECK_OUT:-build/gpu_check}   # several lanes at once (bench/gpu_lanes.sh) each take their own
GPU_TEST_ARGS=${GPU_TEST_ARGS:---programs gemm --mappings h100 --proto f16}

t0=$(date +%s)
STEPS=${STEPS:-check bench}   # any of: check (gpu_check.py), bench (gemm.py), variants (variants.py), tune (tune_gpu.py), oldnew (old_new.py), epilogue (epilogue.py), attention (attention.py), fp8 (fp8.py)
rc1=0; rc2=0; rc3=0; rc4=0; rc5=0; rc6=0; rc7=0
if [[ " $STEPS " == *" check "* ]]; then
  # shellcheck disable=SC2086
  timeout ${CHECK_TIMEOUT:-350} python3 bench/gpu_check.py --out $B $GPU_TEST_ARGS 2>&1 | tee "$OUT/gpu_test.txt"
  rc1=${PIPESTATUS[0]}
fi
if [[ " $STEPS " == *" bench "* ]]; then
  if [ -z "${BENCH_ARGS:-}" ]; then   # time every f16 GEMM gpu_check built (no second nvcc pass)
    BENCH_ARGS="--mapping="
    for d in $B/gemm-* $B/proto-f16; do
      case "$d" in *-bf16) continue;; esac
      [ -f "$d/libgemm.so" ] && BENCH_ARGS="$BENCH_ARGS --build $d"
    done
  fi
  # shellcheck disable=SC2086
  timeout $((570 - ($(date +%s) - t0))) python3 bench/gemm.py $BENCH_ARGS 2>&1 | tee "$OUT/bench.txt"
  rc2=${PIPESTATUS[0]}
fi
if [[ " $STEPS " == *" variants "* ]]; then
  # shellcheck disable=SC2086
  timeout $((575 - ($(date +%s) - t0))) python3 bench/variants.py --build-root $B ${VARIANTS_ARGS:-} 2>&1 \
    | tee "$OUT/variants.txt"
  rc3=${PIPESTATUS[0]}
fi

if [[ " $STEPS " == *" tune "* ]]; then   # cypressc tune from the plain mappings + the torch op checks
  # shellcheck disable=SC2086
  timeout $((590 - ($(date +%s) - t0))) python3 bench/tune_gpu.py --time-limit $((560 - ($(date +%s) - t0))) \
    ${TUNE_ARGS:-} 2>&1 | tee "$OUT/tune.txt"
  rc4=${PIPESTATUS[0]}
fi
if [[ " $STEPS " == *" oldnew "* ]]; then   # old vs new generated kernels (bench/old_kernels.sh made them)
  # shellcheck disable=SC2086
  timeout $((590 - ($(date +%s) - t0))) python3 bench/old_new.py ${OLDNEW_ARGS:-} 2>&1 | tee "$OUT/old_new.txt"
  rc5=${PIPESTATUS[0]}
fi
if [[ " $STEPS " == *" epilogue "* ]]; then   # fused GEMM + bias + activation vs its peers (issue #14)
  if [ -z "${EPILOGUE_ARGS:-}" ]; then   # every gemm_epilogue and plain gemm gpu_check built (not proto)
    EPILOGUE_ARGS=""
    for d in $B/gemm_epilogue-*; do [ -f "$d/libgemm_epilogue.so" ] && EPILOGUE_ARGS="$EPILOGUE_ARGS --build $d"; done
    for d in $B/gemm-*; do [ -f "$d/libgemm.so" ] && EPILOGUE_ARGS="$EPILOGUE_ARGS --gemm-build $d"; done
  fi
  # shellcheck disable=SC2086
  timeout $((590 - ($(date +%s) - t0))) python3 bench/epilogue.py $EPILOGUE_ARGS 2>&1 | tee "$OUT/epilogue.txt"
  rc6=${PIPESTATUS[0]}
fi
if [[ " $STEPS " == *" attention "* ]]; then   # FlashAttention-2/3 forward vs SDPA Flash/cuDNN and Triton (#11, #12)
  if [ -z "${ATTN_BUILDS:-}" ]; then   # every flash_attention2/3 gpu_check built
    for d in $B/flash_attention2-* $B/flash_attention3-*; do
      [ -f "$d/libflash_attention2.so" ] || [ -f "$d/libflash_attention3.so" ] && ATTN_BUILDS="${ATTN_BUILDS:-} $d"
    done
  fi
  ATTN_CMD=""
  for d in ${ATTN_BUILDS:-}; do ATTN_CMD="$ATTN_CMD --build $d"; done
  [ -z "$ATTN_CMD" ] && ATTN_CMD="--mapping ${ATTN_MAPPINGS:-h100_d64_pp_staged_persistent,h100_d128_pp_staged_persistent}"   # built (nvcc) by attention.py
  # shellcheck disable=SC2086
  timeout $((590 - ($(date +%s) - t0))) python3 bench/attention.py $ATTN_CMD ${ATTN_ARGS:-} 2>&1 | tee "$OUT/attention.txt"
  rc7=${PIPESTATUS[0]}
fi
rc8=0
if [[ " $STEPS " == *" fp8 "* ]]; then   # FP8 GEMM vs torch._scaled_mm (#39): every gemm_fp8[_rowwise]-* gpu_check built
  FP8_CMD=""
  for d in ${FP8_BUILDS:-$B/gemm_fp8-* $B/gemm_fp8_rowwise-* $B/gemm_fp8_blockwise-*}; do ls "$d"/lib*.so >/dev/null 2>&1 && FP8_CMD="$FP8_CMD --build $d"; done
  # shellcheck disable=SC2086
  timeout $((590 - ($(date +%s) - t0))) python3 bench/fp8.py $FP8_CMD ${FP8_ARGS:-} 2>&1 | tee "$OUT/fp8.txt"
  rc8=${PIPESTATUS[0]}
fi

echo
echo "==================== summaries ($(( $(date +%s) - t0 ))s)"
[ -f "$OUT/gpu_test.txt" ] && sed -n '/== gpu_check summary/,$p' "$OUT/gpu_test.txt"
[ -f "$OUT/bench.txt" ] && sed -n '/^## GEMM/,$p' "$OUT/bench.txt"
[ -f "$OUT/variants.txt" ] && sed -n '/^## GEMM variants/,$p' "$OUT/variants.txt"
[ -f "$OUT/tune.txt" ] && sed -n '/^## cypressc tune/,$p' "$OUT/tune.txt"
[ -f "$OUT/old_new.txt" ] && sed -n '/^## old vs new/,$p' "$OUT/old_new.txt"
[ -f "$OUT/epilogue.txt" ] && sed -n '/^## GEMM + epilogue/,$p' "$OUT/epilogue.txt"
[ -f "$OUT/attention.txt" ] && sed -n '/^## attention/,$p' "$OUT/attention.txt"
[ -f "$OUT/fp8.txt" ] && sed -n '/^| M x N x K/,$p' "$OUT/fp8.txt"
echo "gpu-test rc=$rc1   bench rc=$rc2   variants rc=$rc3   tune rc=$rc4   oldnew rc=$rc5   epilogue rc=$rc6   attention rc=$rc7   fp8 rc=$rc8 (124 = timed out)"
[ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ "$rc3" = 0 ] && [ "$rc4" = 0 ] && [ "$rc5" = 0 ] && [ "$rc6" = 0 ] && [ "$rc7" = 0 ] && [ "$rc8" = 0 ]
