#!/usr/bin/env bash
# Generate the CUDA of every old/new benchmark target (no GPU, no nvcc needed here).
#
#   bash bench/old_kernels.sh [REV]        # REV defaults to HEAD
#
# "old" = REV's compiler on REV's programs/ and mappings/ (a `git archive` of REV in a temp dir,
# run with PYTHONPATH=<that dir>, so the editable install of the working tree is not used);
# "new" = the working tree's compiler on the working tree's programs/ and mappings/.
# Each target goes to build/{old,new}/<program>-<mapping>-<dtype>/ (the `cypressc build` files:
# <name>.cu/.h/.json, main.cu, Makefile).  Per side it also writes:
#   targets.tsv   label, program, mapping, dtype, cypressc rc (a failed build is listed, not fatal)
#   logs/<label>.log  the compiler's output for that target
#   runtime/      a copy of that tree's cypressc/backend/runtime (cypress.cuh), of its
#                 cypressc/runtime.py (as loader.py) and, where the tree has it, of the
#                 cypressc/abi package that runtime.py imports relatively (as abi/): bench/old_new.py
#                 compiles each side against its own header and loads it with its own loader, not
#                 whatever the device tree has
#   SOURCE        the commit (and, for new, the working-tree diff hash) the side was built from
# Then bench/old_new.py (on the GPU machine) makes, checks and times both sides:
#   run(command="STEPS=oldnew bash bench/gpu_all.sh", carry=[".whl", "build/old", "build/new"])
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
REV=${1:-HEAD}
SHA=$(git rev-parse --verify "$REV^{commit}") || { echo "old_kernels: no commit $REV" >&2; exit 2; }

# program mapping dtype (the benchmark's target list; bench/old_new.py times whatever is built);
# TARGETS in the environment replaces it (same format: one "program mapping dtype" per line)
TARGETS=${TARGETS:-"
gemm h100 f16
gemm h100_128x128 f16
gemm h100_256x128 f16
gemm h100_k128 f16
gemm h100_nows f16
gemm h100_alias f16
gemm h100_wgs1 f16
gemm h100 bf16
batched_gemm h100 f16
batched_gemm h100 bf16
dual_gemm h100 f16
dual_gemm h100 bf16
gemm_reduction h100 f16
gemm_reduction h100 bf16
gemm_bt h100 f16
gemm_bt h100 bf16
"}

TMP=$(mktemp -d /tmp/cyp_old_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
git archive --format=tar "$SHA" | tar -x -C "$TMP" || { echo "old_kernels: git archive $SHA failed" >&2; exit 2; }

# build_side SIDE TREE: every target with TREE's compiler, programs and mappings
build_side() {
  local side=$1 tree=$2 out=$ROOT/build/$1 n_ok=0 n_bad=0
  rm -rf "$out"
  mkdir -p "$out/logs"
  # the import must resolve to TREE, not to the editable install of the working tree
  local where
  where=$(cd "$tree" && PYTHONPATH="$tree" python3 -c 'import cypressc, os; print(os.path.dirname(cypressc.__file__))') \
    || { echo "old_kernels: cannot import cypressc from $tree" >&2; return 1; }
  if [ "$where" != "$tree/cypressc" ]; then
    echo "old_kernels: $side: cypressc imports from $where, not $tree/cypressc" >&2; return 1
  fi
  cp -r "$tree/cypressc/backend/runtime" "$out/runtime"
  # that tree's Python loader too: each side's kernel info is read by the loader that wrote it
  cp "$tree/cypressc/runtime.py" "$out/runtime/loader.py"
  if [ -d "$tree/cypressc/abi" ]; then  # the loader's parts (split out of runtime.py)
    cp -r "$tree/cypressc/abi" "$out/runtime/abi"
    rm -rf "$out/runtime/abi/__pycache__"
  fi
  printf 'label\tprogram\tmapping\tdtype\trc\n' > "$out/targets.tsv"
  while read -r prog map dt; do
    [ -z "$prog" ] && continue
    local label=$prog-$map-$dt rc
    (cd "$tree" && PYTHONPATH="$tree" python3 -c 'from cypressc.cli import main; main()' \
        build "programs/$prog.cyp" -m "mappings/$prog/$map.yaml" --dtype "T=$dt" -o "$out/$label") \
      > "$out/logs/$label.log" 2>&1
    rc=$?
    if [ $rc = 0 ] && ! ls "$out/$label"/*.cu "$out/$label"/*.h "$out/$label/Makefile" >/dev/null 2>&1; then
      echo "[old_kernels: rc 0 but no .cu/.h/Makefile in $out/$label]" >> "$out/logs/$label.log"; rc=99
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$prog" "$map" "$dt" "$rc" >> "$out/targets.tsv"
    if [ $rc = 0 ]; then n_ok=$((n_ok + 1)); else
      n_bad=$((n_bad + 1))
      echo "  $side $label: FAILED (rc=$rc): $(grep -m1 -E 'error|Error' "$out/logs/$label.log" | cut -c1-200)"
    fi
  done <<< "$TARGETS"
  echo "$side: $n_ok built, $n_bad failed -> build/$side ($(du -sh "$out" | cut -f1))"
}

echo "old = $REV ($SHA)"
build_side old "$TMP" || exit 1
echo "$SHA $REV" > build/old/SOURCE
build_side new "$ROOT" || exit 1
{ echo "$(git rev-parse HEAD) + working tree"; echo "diff-sha256 $(git diff HEAD | sha256sum | cut -d' ' -f1)"; } > build/new/SOURCE
kb=$(du -sk build/old build/new | awk '{s += $1} END {print s}')
echo "build/old + build/new: ${kb} KiB (the device carry limit is 64 MiB with .whl/ included)"
[ "$kb" -lt 50000 ] || echo "old_kernels: WARNING: too large to carry; delete the lib*.so / harness binaries" >&2
