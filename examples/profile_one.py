"""One fused-kernel launch for a profiler (ncu): Qwen3.5 TP4 FP8 (or argv[3]: the format), T tokens (default 8)."""
import sys

import torch

from sglang_smallm_plugin import kernels
from sglang_smallm_plugin.shapes import SHAPES
from sglang_smallm_plugin.testdata import make_call

T = int(sys.argv[1]) if len(sys.argv) > 1 else 8
fmt = sys.argv[3] if len(sys.argv) > 3 else "fp8_block128"
call = make_call(SHAPES[sys.argv[2] if len(sys.argv) > 2 else "qwen35-tp4"], fmt, "row_major", T, 0, "cuda")
for _ in range(3):
    kernels.run_moe(call)
torch.cuda.synchronize()
