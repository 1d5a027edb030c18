# Newcomer entry points (see README.md). Everything installs into ./.venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test isa clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

setup: $(BIN)/python
	# ziglang pinned: its clang compiles the gfx950 ISA whose instruction counts tests/test_kernel_compile.py bounds
	# exactly (a newer clang may schedule differently; update the pin and those bounds together)
	$(BIN)/pip install -q sglang==0.5.23 "pluggy>=1.3" pytest ziglang==0.17.1 matplotlib
	# cuobjdump + nvdisasm: the CPU tests read the sm_90a SASS of the kernels (tests/test_kernel_compile.py)
	$(BIN)/pip install -q "nvidia-cuda-cuobjdump>=13" "nvidia-cuda-nvdisasm>=13"
	# builds the kernels when torch has CUDA/ROCm and a toolkit is present; else pure Python (it says why)
	$(BIN)/pip install -q --no-build-isolation --no-deps -e .

demo: setup
	$(BIN)/sglang-smallm demo

test: setup
	$(BIN)/python -m pytest -q tests

isa: setup
	$(BIN)/sglang-smallm isa --arch gfx950 --out isa_out

clean:
	rm -rf $(VENV) build *.egg-info sglang_smallm_plugin/_C*.so sglang_smallm_plugin/hip_src
