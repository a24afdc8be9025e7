#!/usr/bin/env bash
# Issue #35's device recipe: `cypressc tune` on FlashAttention-3 at d = 64, seq 1024 (causal 1 and 0)
# from the shipped mapping, then the start and each tune's best against cuDNN (bench/attention.py)
# in one process.  Carry .whl (pydantic, nvidia-cutlass, z3).  Extra ATTN_BUILDS (DIR[:D] ...)
# are timed in the same attention run (e.g. an old and a new build of the same mapping).
#   run(command="bash bench/tune_fa3_d64.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/cyp_out}
mkdir -p "$OUT"
if ! python3 -c "import pydantic, cutlass_library, z3" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 CYPRESSC_CACHE_DIR=/tmp/cyp_cache
cyp() { python3 -c 'import sys; from cypressc.cli import main; sys.argv[0] = "cypressc"; main()' "$@"; }
P=programs/flash_attention3.cyp
M=mappings/flash_attention3/h100_d64_pp_staged_persistent.yaml
SIZES="--size B=16 --size H=16 --size M=1024 --size N=1024 --size D=64 --size HK=16 --float scale=0.125"
builds="build/tune_start:64"
cyp build $P -m $M -o build/tune_start > "$OUT/build_start.txt" 2>&1 || cat "$OUT/build_start.txt"
for c in ${CAUSAL:-1 0}; do
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout ${TUNE_TIMEOUT:-200} bash -c "$(declare -f cyp); cyp tune $P -m $M $SIZES --size causal=$c --budget ${BUDGET:-2} -o $OUT/best$c.yaml" \
    > "$OUT/tune$c.txt" 2> "$OUT/tune$c.err"
  echo "tune causal=$c rc=$? in $(( $(date +%s) - t0 )) s"; tail -25 "$OUT/tune$c.txt"; grep -E "pruned|round" "$OUT/tune$c.err" | tail -8
  if [ -f "$OUT/best$c.yaml" ]; then
    cyp build $P -m "$OUT/best$c.yaml" -o "build/tune_best$c" > /dev/null 2>&1 && builds="$builds build/tune_best$c:64"
  fi
done
args=""
for b in $builds ${ATTN_BUILDS:-}; do args="$args --build $b"; done
# shellcheck disable=SC2086
timeout ${ATTN_TIMEOUT:-240} python3 bench/attention.py --program flash_attention3 $args --seqs ${SEQS:-1024} --causal both --no-triton 2>&1 \
  | tee "$OUT/attention.txt" | sed -n '/^## attention/,$p'
