#!/bin/bash
# One H200 job: SGLang's own FusedMoE (FP8 block-scale) with --moe-runner-backend smallm and triton
# (examples/gpu_sglang_layer_check.py), on the package built here for sm_90a. SGLang 0.5.23's Python
# code and import dependencies come from the peer's .peer/ (../shared/peer/prepare.sh) and
# .sglgpu/ (examples/sglang_gpu/prepare.sh); carry [".peer", ".sglgpu"]. sgl_kernel is our import-only
# stub (examples/sglang_gpu/stubs: every op, in every submodule, raises when called), so whatever calls it
# is reported as not runnable here.
# SMALLM_CHECK_TOKENS passes through (default in the check).
source examples/h200_common.sh
[ -d .peer ] && [ -d .sglgpu ] || { echo "carry .peer and .sglgpu (see the header)"; exit 2; }
stamp build
build
stamp sglang-env
mkdir -p /tmp/sg && tar xzf .peer/sglang.tgz -C /tmp/sg
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sgsite \
  .peer/whl/*.whl .sglgpu/*.whl > "$OUT/sglang_env.log" 2>&1 || { tail -5 "$OUT/sglang_env.log"; pack; exit 12; }
python3 -c 'import importlib.metadata as m, sys; from packaging.version import Version
sys.exit(0 if Version(m.version("typing_extensions")) >= Version("4.14.1") else 1)' || \
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sgsite \
  .peer/whl_te/*.whl >> "$OUT/sglang_env.log" 2>&1
stamp layer-check
(cd /tmp && PYTHONPATH=/tmp/sgsite:/tmp/sg:$R/examples/sglang_gpu/stubs timeout 400 python3 "$R/examples/gpu_sglang_layer_check.py" \
  > "$OUT/layer_check.log" 2>&1; echo "rc=$?" >> "$OUT/layer_check.log")
stamp done
grep -E "^\[(pass|fail|not runnable here)\]|smallm runner:|layer check:|^rc=|Error" "$OUT/layer_check.log" | cut -c1-220 | tail -40
pack
