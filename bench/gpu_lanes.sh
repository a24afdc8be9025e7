#!/usr/bin/env bash
# Several GPU jobs at once on a multi-GPU machine, one "lane" per GPU: each argument is a bash
# command run with CUDA_VISIBLE_DEVICES=<its index>, OUT=$OUT/lane<i> and GPU_CHECK_OUT=build/lane<i>
# (bench/gpu_all.sh builds there), its output in $OUT/lane<i>.log; the summaries printed last.
#
#   run(kind="nvidia-h100-x4", carry=[".whl", ...], command="bash bench/gpu_lanes.sh \
#       'STEPS=check GPU_TEST_ARGS=\"--programs gemm --mappings all\" bash bench/gpu_all.sh' \
#       'STEPS=oldnew bash bench/gpu_all.sh'")
#
# Lanes share the CPUs (nvcc) but not a GPU: a timing lane is disturbed only by the others'
# host load, so compare timings within one lane (old/new and the peer interleaved), never across.
# Exit status 0 only if every lane's does.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/cyp_out}
mkdir -p "$OUT"
# install the carried wheels once, before the lanes race for /tmp/site
if ! python3 -c "import pydantic, cutlass_library, z3" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_lanes: installing .whl/*.whl failed" >&2; exit 1; }
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$#" -le "$ngpu" ] || { echo "gpu_lanes: $# lanes but $ngpu GPU(s)" >&2; exit 2; }
t0=$(date +%s)
pids=()
for i in $(seq 0 $(($# - 1))); do
  lane=${*:$((i + 1)):1}
  mkdir -p "$OUT/lane$i"
  ( export CUDA_VISIBLE_DEVICES=$i OUT=$OUT/lane$i GPU_CHECK_OUT=build/lane$i
    echo "lane $i: $lane"; bash -c "$lane" ) > "$OUT/lane$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; r=$?
  echo "lane $i: rc=$r ($(( $(date +%s) - t0 ))s)"
  [ "$r" = 0 ] || rc=1
done
for i in "${!pids[@]}"; do
  echo; echo "==================== lane $i: $(head -1 "$OUT/lane$i.log")"
  sed -n '/==================== summaries/,$p' "$OUT/lane$i.log" | tail -n +2
  grep -q "==================== summaries" "$OUT/lane$i.log" || tail -20 "$OUT/lane$i.log"
done
exit $rc
