#!/bin/bash
# One H200 job: SGLang's own FusedMoE (FP8 block-scale) with --moe-runner-backend smallm and triton
# (examples/gpu_sglang_layer_check.py), on the package built here for sm_90a. SGLang 0.5.23's Python
# code and import dependencies come from the peer's .peer/ (../shared/peer/prepare.sh) and
# .sglgpu/ (examples/sglang_gpu/prepare.sh); carry [".peer", ".sglgpu"]. sgl_kernel is our import-only
# stub (examples/sglang_gpu/stubs: every op, in every submodule, raises when called), so whatever calls it
# is reported as not runnable here.
# FORMATS (default fp8_block128): mxfp4 builds SGLang's Quark W4A4 MXFP4 scheme, which smallm refuses
# at startup on CUDA by design (the scheme's own path, the fallback above the cap, is AITER's: ROCm only;
# seen on this CPU machine with CUDA faked, not run on the H200). SMALLM_CHECK_TOKENS overrides each
# format's token counts (1, 2, 3, 8, the H200 cap and one more).
source examples/h200_common.sh
[ -d .peer ] && [ -d .sglgpu ] || { echo "carry .peer and .sglgpu (see the header)"; exit 2; }
stamp build
build
stamp sglang-env
sglang_env || { pack; exit 12; }
for fmt in ${FORMATS:-fp8_block128}; do
  stamp "layer-check $fmt"
  tokens=1,2,3,8,59,60  # the H200 cap at the default shape (I = 128, top-11; 63 until 2026-12-05) and one more
  (cd /tmp && SMALLM_CHECK_FORMAT=$fmt SMALLM_CHECK_TOKENS=${SMALLM_CHECK_TOKENS:-$tokens} \
    PYTHONPATH=$SG_PATH timeout --foreground 400 python3 "$R/examples/gpu_sglang_layer_check.py" \
    > "$OUT/layer_check_$fmt.log" 2>&1; echo "rc=$?" >> "$OUT/layer_check_$fmt.log")
done
stamp done
for fmt in ${FORMATS:-fp8_block128}; do
  echo "== $fmt"
  grep -E "^\[(pass|fail|not runnable here)\]|smallm runner:|layer cannot run|layer check|^rc=|Error" "$OUT/layer_check_$fmt.log" | cut -c1-200 | tail -20
done
pack
