#!/usr/bin/env bash
# One device call for the attention backward (issue #38): gpu_check of the committed mapping
# (CHECK=0 skips it), then bench/attention_bwd.py over carried `cypressc build` directories of
# tests/programs/flash_attention_bwd.cyp (old and new side by side, each against cuDNN and Flash
# SDPA in the same process), then, for PROFILE (one build directory), ncu of its main kernel
# and the opcode histogram of its SASS.
#
#   bash bench/old_kernels.sh is for the bundled programs; for the backward build the old side
#   yourself, e.g. from a worktree of HEAD:
#     (cd WT && PYTHONPATH=WT python -m cypressc.cli build tests/programs/flash_attention_bwd.cyp \
#        -m tests/mappings/flash_attention_bwd/h100_d128.yaml -o $REPO/build/bwd/old)
#   run(command="BUILDS='build/bwd/old build/bwd/new' PROFILE=build/bwd/new bash bench/bwd_ab.sh",
#       carry=[".whl", "build/bwd"])
# Environment: BUILDS (required), PROFILE, CHECK (1), BENCH_ARGS (default "--seqs 2048,8192
# --rounds 3 --reps 5"), CHECK_ARGS (gpu_check's, default flash_attention_bwd h100 f16,bf16).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/cyp_out}
mkdir -p "$OUT"
if [ "${CHECK:-1}" = 1 ]; then
  STEPS=check CHECK_TIMEOUT=${CHECK_TIMEOUT:-300} \
    GPU_TEST_ARGS=${CHECK_ARGS:-"--programs flash_attention_bwd --mappings h100 --dtypes f16,bf16"} \
    bash bench/gpu_all.sh > "$OUT/check.txt" 2>&1
  echo "gpu_check rc=$?"; grep -E "PASS|FAIL|refused|error" "$OUT/check.txt" | tail -12
fi
if [ ! -d /tmp/site ] && ! python3 -c "import pydantic, cutlass_library" 2>/dev/null; then
  # CHECK=0 on a fresh machine: make's CUTLASS check needs the carried wheels too
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    || { echo "bwd_ab: installing .whl/*.whl failed" >&2; exit 1; }
fi
if [ -d /tmp/site ]; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; fi
args=()
for b in $BUILDS; do args+=(--build "$b"); done
BENCH_ARGS=${BENCH_ARGS:-"--seqs 2048,8192 --rounds 3 --reps 5"}
# shellcheck disable=SC2086
timeout ${BENCH_TIMEOUT:-300} python3 bench/attention_bwd.py "${args[@]}" $BENCH_ARGS \
  > "$OUT/bench_bwd.txt" 2>&1
echo "bench rc=$?"
if [ -n "${PROFILE:-}" ]; then
  so=$(ls "$PROFILE"/lib*.so | head -1)
  cuobjdump -sass "$so" > "$OUT/sass.txt" 2>&1
  # opcodes of the main kernel (the function whose name holds dkdv), most frequent first
  awk '/Function : .*dkdv/{f=1; next} /Function :/{f=0} f && /\/\*[0-9a-f]{4}\*\//{
         s=$0; sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", s); sub(/^@!?U?P[0-9T]+[ \t]+/, "", s);
         split(s, w, /[ \t;]/); print w[1]}' "$OUT/sass.txt" | sort | uniq -c | sort -rn > /tmp/sass_hist.txt
  echo "sass: $(awk '{n+=$1} END {print n}' /tmp/sass_hist.txt) instructions in the main kernel"
  timeout ${NCU_TIMEOUT:-200} ncu --clock-control none -k regex:dkdv_block_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats \
    --metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_sectors_op_red.sum \
    python3 bench/attention_bwd.py --build "$PROFILE" --seqs 4096 --causal 0 --rounds 1 --reps 1 > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$?"
  grep -E "Duration|Tensor|pipe_tensor|inst_executed|sectors_op_red|Stall|Warp Cycles Per Issued" "$OUT/ncu.txt" | head -30
  head -45 /tmp/sass_hist.txt | paste - - -  # the device machine has no `column`
fi
sed -n '/## attention backward/,$p' "$OUT/bench_bwd.txt"
