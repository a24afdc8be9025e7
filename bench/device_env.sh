# Sourced by the device scripts (bench/cluster_gpu.sh, bench/cluster_tune.sh): $OUT, and the
# wheels carried in .whl/ (pydantic, nvidia-cutlass, z3-solver, ... for the device's Python
# 3.12: /work/.library/device/README.md) installed into /tmp/site where they are missing.
export OUT=${OUT:-/tmp/cyp_out}
mkdir -p "$OUT"
if ! python3 -c "import pydantic, cutlass_library, z3" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "device_env: installing .whl/*.whl failed" >&2; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
