"""SGLang's own FusedMoE (FP8 block-scale) on a GPU, built twice from the same weights:
--moe-runner-backend triton, and smallm. Checks that smallm's fallback calls give bit-identical
results to the triton backend, that SGLANG_ROCM_SMALLM_MOE=0 sends everything there, and that
calls inside the cap run the compiled kernel within tolerance of the reference.
Run on a GPU machine with a full SGLang install. Status: not yet run successfully here — the H200
image carries only the peer's import subset of SGLang (no compressed_tensors etc.), so building
SGLang's quantization stack failed there (2026-11-30)."""

import logging
import os
import sys

import torch

logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

from sglang_smallm_plugin.shapes import MoeShape  # noqa: E402
from sglang_smallm_plugin.sglang_integration import layer_harness as H  # noqa: E402
from sglang_smallm_plugin.testdata import make_call, make_weights, reference_of  # noqa: E402
from sglang_smallm_plugin.tolerances import TOLERANCES, rel_l2  # noqa: E402

shape = MoeShape("qwen35-tp8-reduced", 4096, 33, 11, 128, 1)
DEV = os.environ.get("SMALLM_CHECK_DEVICE", "cuda")
w = make_weights(shape, "fp8_block128", "row_major", 0, DEV)
tokens = (1, 2, 3, 8)
calls = {T: make_call(shape, "fp8_block128", "row_major", T, 50 + T, DEV, w) for T in tokens}


def run_all(layer):
    return {T: H.forward(layer, c.x, c.topk_weights, c.topk_ids).clone() for T, c in calls.items()}


H.setup("triton")
out_triton = run_all(H.build_layer(shape, "fp8_block128", {k: v.clone() for k, v in w.items()}, device=DEV))
H.setup("smallm")
layer = H.build_layer(shape, "fp8_block128", {k: v.clone() for k, v in w.items()}, device=DEV, layer_id=1)
core = layer.quant_method.runner.runner_core
print("smallm runner:", type(core).__name__, "fallback:", core.fallback_backend.value)
ok = True
for T, c in calls.items():
    d = core.selector.decide(core.describe(*__import__("sglang_smallm_plugin.demo", fromlist=["_dispatch"])._dispatch(layer, c), core.config))
    out = H.forward(layer, c.x, c.topk_weights, c.topk_ids)
    err = rel_l2(out.float(), reference_of(c).float())
    same = torch.equal(out, out_triton[T])
    line = f"T={T} path={d.path} rel_err={err:.2e} bit-identical-to-triton={same}"
    if d.is_kernel:
        ok &= err <= TOLERANCES["moe_fp8_blockscale"]
    else:
        ok &= same
    print(line)
os.environ["SGLANG_ROCM_SMALLM_MOE"] = "0"
for T, c in calls.items():
    out = H.forward(layer, c.x, c.topk_weights, c.topk_ids)
    same = torch.equal(out, out_triton[T])
    ok &= same
    print(f"SGLANG_ROCM_SMALLM_MOE=0 T={T} bit-identical-to-triton={same}")
print("GPU SGLang layer check:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
