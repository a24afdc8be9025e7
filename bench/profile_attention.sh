#!/usr/bin/env bash
# ncu profile of FlashAttention kernels on the device machine (issues #11, #12): one launch of each
# build's harness binary, and of cuDNN's SDPA kernel through torch, at one shape; the sections that
# say where the time goes (issue slots, pipe utilization, warp stall reasons) go to
# $OUT/ncu_<label>.txt and a few lines of each are printed.
#
#   bash bench/profile_attention.sh "B H M D HK N causal scale" DIR [DIR ...]
#
# DIR is a flash_attention2/3 build (its harness binary, built by make).  The cuDNN row uses the same
# B, H, M (= N), D, causal.  Never changes clocks (--clock-control none).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cyp_out}
mkdir -p "$OUT"
read -r B H M D HK N CAUSAL SCALE <<< "$1"
shift
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
STALLS="wait barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle dispatch_stall not_selected selected gmma membar sleeping branch_resolving no_instruction"
METRICS="--metrics sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"
for r in $STALLS; do METRICS="$METRICS,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
show() {
  grep -E "Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|pipe_shared|pipe_xu|pipe_fma|pipe_alu|issue_stalled" "$1" \
    | sed -e 's/smsp__average_warps_issue_stalled_/stall /' -e 's/_per_issue_active.ratio//' -e 's/.avg.pct_of_peak_sustained_active//' \
    | awk '{$1=$1; print}' | head -40
}
for d in "$@"; do
  name=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['name'])" "$d"/*.json 2>/dev/null)
  label=$(basename "$d")
  [ -x "$d/$name" ] || make -C "$d" >/dev/null 2>&1 || { echo "no harness binary in $d (make failed)"; continue; }
  # -k: the harness also launches its random-fill kernels, which are not the ones to profile
  ncu --clock-control none -k regex:"$name" --launch-skip 3 --launch-count 1 $SECTIONS $METRICS --page details \
    "$d/$name" "$B" "$H" "$M" "$D" "$HK" "$N" "$CAUSAL" "$SCALE" --warmup 3 --iters 3 > "$OUT/ncu_$label.txt" 2>&1
  echo "== $label ($B x $H x $M x $D, causal $CAUSAL)"; show "$OUT/ncu_$label.txt"
done
cat > /tmp/cudnn_sdpa.py <<PYEOF
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn($B, $H, $M, $D, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(5):
        F.scaled_dot_product_attention(q, k, v, is_causal=bool($CAUSAL))
torch.cuda.synchronize()
PYEOF
ncu --clock-control none --launch-skip 3 --launch-count 1 -k regex:"cudnn|sm90|fmha|flash|attn" $SECTIONS $METRICS --page details \
  python3 /tmp/cudnn_sdpa.py > "$OUT/ncu_cudnn.txt" 2>&1
echo "== cuDNN SDPA"; grep -m3 -E "^\s+[a-zA-Z_].*\(\d+, \d+, \d+\)x|Context|Stream" "$OUT/ncu_cudnn.txt" | head -3; show "$OUT/ncu_cudnn.txt"
