#!/usr/bin/env bash
# One device call for cypressc.torch.flash_attention (issue #38): builds the op's kernels (four
# processes at a time into cypressc's cache), runs tests/gpu/test_flash_attention_op_gpu.py
# (gradients, training against SDPA, torch.compile, CUDA graph), then bench/attention.py
# --backward --op (backward alone and forward + backward against cuDNN and Flash SDPA).
#
#   run(command="bash bench/attention_op_gpu.sh", carry=[".whl"], timeout_s=600)
# Environment: BENCH_ARGS (default "--seqs 2048,8192 --rounds 3 --reps 5"), KEYS (the
# (pass, head bucket, dtype) builds, default all eight; empty: none, e.g. with a carried
# CYPRESSC_CACHE_DIR), TESTS (1; 0 skips the pytest step), TEST_ARGS (pytest's, e.g.
# "-k deterministic"), OP_BENCH (1; 0 skips the bench).  The deterministic backward (session 28):
#   run(command="KEYS= TEST_ARGS='-k deterministic' OP_BENCH=0 CYPRESSC_CACHE_DIR=$PWD/build/cache \
#     bash bench/attention_op_gpu.sh; CHECK=0 BUILDS='build/bwd/h100_d128_tma build/bwd/h100_d128_det' \
#     BENCH_ARGS='--seqs 2048,8192 --rounds 3 --reps 5 --repeat 5' bash bench/bwd_ab.sh",
#     carry=[".whl", "build/bwd", "build/cache"])
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/cyp_out}
mkdir -p "$OUT"
if ! python3 -c "import pydantic, cutlass_library" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "installing .whl/*.whl failed" >&2; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CYPRESSC_CACHE_DIR=${CYPRESSC_CACHE_DIR:-/tmp/cyp_cache}
start=$(date +%s)
keys=${KEYS-"forward,64,bf16 forward,128,bf16 backward,64,bf16 backward,128,bf16 forward,64,f16 forward,128,f16 backward,64,f16 backward,128,f16"}
for k in $keys; do
  IFS=, read -r which d t <<< "$k"
  python3 -c "
import torch
from cypressc.torch.attention import _kernel
_kernel('$which', $d, {'f16': torch.float16, 'bf16': torch.bfloat16}['$t'])
" > "/tmp/build_${which}_${d}_${t}.txt" 2>&1 &
  while [ "$(jobs -r | wc -l)" -ge 4 ]; do sleep 1; done
done
wait
echo "builds: $(( $(date +%s) - start )) s"; tail -n 3 /tmp/build_*.txt 2>/dev/null | grep -iE "error|refused" | head
if [ "${TESTS:-1}" = 1 ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider -p no:logging ${TEST_ARGS:-} tests/gpu/test_flash_attention_op_gpu.py > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests rc=$?"; grep -E "^E |Error|passed|failed" "$OUT/gpu_tests.txt" | head -30
fi
[ "${OP_BENCH:-1}" = 1 ] || exit 0
BENCH_ARGS=${BENCH_ARGS:-"--seqs 2048,8192 --rounds 3 --reps 5"}
# shellcheck disable=SC2086
timeout ${BENCH_TIMEOUT:-400} python3 bench/attention.py --backward --op $BENCH_ARGS \
  > "$OUT/bench_op.txt" 2>&1
echo "bench rc=$?"
sed -n '/## cypressc.torch.flash_attention/,$p' "$OUT/bench_op.txt"
grep -E "Error|error" "$OUT/bench_op.txt" | head -5
