# cypressc developer targets.  `make test` is what CI runs (see .ci/run).
PY ?= python3
PIP ?= $(PY) -m pip

.PHONY: install test golden demo gpu-test bench lint
install:
	$(PIP) install -q -e '.[test]'

test: install
	$(PY) -m pytest -q

golden: install
	$(PY) -m pytest -q tests --update-golden

demo: install
	cypressc check programs/gemm.cyp -m mappings/gemm/h100.yaml
	cypressc explain programs/gemm.cyp -m mappings/gemm/h100.yaml
