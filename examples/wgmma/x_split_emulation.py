"""CPU emulation: does x as two (or three) e4m3 parts, each token scaled by a power of two per 512-wide K
slice (hip/smallm_gateup_tma.h), hold bf16 x? The package's reference MoE (fp64 sums) with x replaced by
its reconstruction, against the same with x itself, on the selftest's data (`testdata.make_call`).
Usage: python examples/wgmma/x_split_emulation.py [shape, default qwen35-tp4] (with the package
installed; torch on CPU). Result, 2026-12-02 (examples/results "h200-tma"): rel. L2 error 0 to 2.5e-9 with
two parts, x itself within 1.5e-8: the split is not where the TMA gate/up's 8-9.7e-4 comes from."""
import dataclasses
import sys

import torch

from sglang_smallm_plugin.reference import moe as refmoe
from sglang_smallm_plugin.shapes import SHAPES
from sglang_smallm_plugin.testdata import make_call, reference_of
from sglang_smallm_plugin.tolerances import rel_l2


def split(x: torch.Tensor, parts: int = 2, slice_: int = 512) -> torch.Tensor:
    """x rebuilt from `parts` e4m3 parts (each the last's residual times 16), scaled per token and slice
    so that the slice's largest |x| lies in [128, 256)."""
    T, D = x.shape
    v = x.float().view(T, D // slice_, slice_)
    m = v.abs().amax(-1, keepdim=True)
    s = torch.exp2(7 - torch.floor(torch.log2(torch.where(m > 0, m, torch.ones_like(m)))))
    r, acc, f = v * s, torch.zeros_like(v), 1.0
    for _ in range(parts):
        q = (r * f).to(torch.float8_e4m3fn).float() / f
        acc, r, f = acc + q, r - q, f * 16.0
    return (acc / s).view(T, D)


def main(shape_name: str) -> None:
    shape = SHAPES[shape_name]
    print("shape        T seed parts  rel_l2(out)  rel err(x)")
    for T in (1, 8):
        for seed in (0, 1):
            call = make_call(shape, "fp8_block128", "row_major", T, seed, "cpu")
            ref = reference_of(call, torch.float64)
            for parts in (2, 3):
                xs = split(call.x, parts)
                c = dataclasses.replace(call, x=xs)
                out = refmoe.fused_moe_fp8_blockscale(c.x, c.w13, c.w2, c.w13_scale, c.w2_scale, c.topk_weights,
                                                      c.topk_ids, acc_dtype=torch.float64,
                                                      routed_scaling_factor=c.routed_scaling_factor)
                xerr = ((xs - call.x.float()).norm() / call.x.float().norm()).item()
                print(f"{shape.name:<12} {T:>1} {seed:>4} {parts:>5}  {rel_l2(out.float(), ref.float()):11.2e}  {xerr:10.2e}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "qwen35-tp4")
