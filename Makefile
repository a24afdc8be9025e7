# cypressc developer targets.  `make test` is what CI runs (see .ci/run).
PY ?= python3
PIP ?= $(PY) -m pip

.PHONY: install test test-full golden demo gpu-test bench lint lint-only
# torch==2.13.0 is a CPU build found locally (any other spec downloads GBs): the tests of the
# PyTorch op (tests/tune/test_torch_op.py) need it; cypressc itself does not.
install:
	$(PIP) install -q -e '.[test]'
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0

# lint first: seconds, and a style slip fails before eight minutes of tests
test: install lint-only
	$(PY) -m pytest -q -n 2 --dist loadgroup

# releases, and changes to the passes or the backend: more random schedules (tests/budget.py)
test-full: install
	CYPRESSC_TEST_FULL=1 $(PY) -m pytest -q -n 2 --dist loadgroup

# only the tests that read a golden file run (tests/conftest.py), on two workers
golden: install
	$(PY) -m pytest -q -n 2 --dist loadgroup tests --update-golden

demo: install
	cypressc check programs/gemm.cyp -m mappings/gemm/h100.yaml
	cypressc explain programs/gemm.cyp -m mappings/gemm/h100.yaml --after copy-elimination
	cypressc build programs/gemm.cyp -m mappings/gemm/h100.yaml -o build/gemm
	$(MAKE) -C build/gemm
	@echo "built build/gemm/gemm and build/gemm/libgemm.so; on a Hopper GPU: ./build/gemm/gemm 8192 8192 8192"

# GPU-only (not run by CI): correctness of built kernels, then GEMM speed vs cuBLAS and Triton
# and FlashAttention-2 (programs/flash_attention2.cyp) vs torch SDPA and Triton.
# Need nvcc, PyTorch with CUDA, Triton and the nvidia-cutlass headers; no `install` (a device
# machine may have no package registry).  bench/gpu_all.sh runs them in one device call.
GPU_TEST_ARGS ?= --programs gemm --mappings h100 --proto f16
BENCH_ARGS ?= --mapping h100 --proto
ATTN_BENCH_ARGS ?= --mapping h100_d64,h100_d128
gpu-test:
	PYTHONUNBUFFERED=1 $(PY) bench/gpu_check.py $(GPU_TEST_ARGS)

bench:
	PYTHONUNBUFFERED=1 $(PY) bench/gemm.py $(BENCH_ARGS)
	PYTHONUNBUFFERED=1 $(PY) bench/variants.py
	PYTHONUNBUFFERED=1 $(PY) bench/attention.py $(ATTN_BENCH_ARGS)

# ruff's rules and formatter as pyproject.toml sets them (`ruff format .` fixes the formatting)
lint: install lint-only

lint-only:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
