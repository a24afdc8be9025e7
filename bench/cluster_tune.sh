#!/usr/bin/env bash
# cypressc tune over the cluster shapes (issue #39): none / [2, 1] / [1, 2], every other knob
# fixed at the h100 mapping's value (tests/mappings/cluster/<program>_tune.yaml), each
# candidate checked against the float32 PyTorch reference of bench/gpu_check.py and timed on
# the GPU; the tune's table and the mapping it picks, per shape.
#   run(command="bash bench/cluster_tune.sh", carry=[".whl"], timeout_s=600)
# TUNES: "program MxNxK ..." (default below).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/device_env.sh
source bench/device_env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export CYPRESSC_CACHE_DIR=${CYPRESSC_CACHE_DIR:-build/tune_cache}
TUNES=${TUNES:-"gemm:8192x8192x8192 gemm_fp8:16384x16384x16384 gemm_fp8:8192x8192x1024 gemm_fp8:4096x4096x4096"}
rc=0
for spec in $TUNES; do
  p=${spec%%:*}; shape=${spec#*:}; IFS=x read -r M N K <<< "$shape"
  extra=""
  [ "$p" = gemm_fp8 ] && extra="--dtype T=bf16 --float scale_a=1.0 --float scale_b=1.0"
  echo "==== tune $p $shape"
  # shellcheck disable=SC2086
  python3 -m cypressc.cli tune programs/$p.cyp -m tests/mappings/cluster/${p}_tune.yaml \
    --size M=$M --size N=$N --size K=$K $extra --reference bench/tune_gpu.py:ref_$p \
    --no-progress -o "$OUT/tuned_${p}_${shape}.yaml" 2>&1 | tee "$OUT/tune_${p}_${shape}.txt" || rc=1
  grep -n "cluster" "$OUT/tuned_${p}_${shape}.yaml" || echo "(picked: no cluster)"
done
exit $rc
