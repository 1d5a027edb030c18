"""Every numerical tolerance the tests, selftest and benchmarks use, in one table.

Relative L2 error = ||out - ref|| / ||ref|| with both in fp32, ref from the pure-torch
reference (fp32 dequantized weights, fp32 intermediate, bf16 out).
"""

from .calls import FP8_BLOCK128

TOLERANCES = {
    # kernel (bf16 activations, fp32 accumulation, bf16 out) vs reference
    "moe_fp8_blockscale": 1e-3,
    "moe_mxfp4": 1e-3,
    # reference (fp64 accumulation) vs a straightforward fp64 loop, both rounded to bf16
    "reference_vs_loop": 1e-5,
    # SGLang's layer through the reference provider (fp32) vs the fp64 loop: differ only where an
    # element straddles a bf16 rounding boundary
    "sglang_layer_vs_loop": 1e-3,
    # reference vs an fp64 reference (accumulation order only)
    "reference_fp32_vs_fp64": 2e-3,
    # the quantizers used to make test weights: round-trip error of random normal data
    "mxfp8_roundtrip": 6e-2,
    "mxfp4_roundtrip": 2e-1,
    "fp8_block_roundtrip": 6e-2,
}


def moe_tolerance(weight_format: str) -> float:
    """The kernel-vs-reference tolerance of a MoE call in `weight_format` (FP8_BLOCK128 or MXFP4)."""
    return TOLERANCES["moe_fp8_blockscale" if weight_format == FP8_BLOCK128 else "moe_mxfp4"]


def rel_l2(out, ref) -> float:
    out, ref = out.double(), ref.double()
    if not bool(out.isfinite().all()):
        return float("inf")  # NaN / Inf never pass
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)
