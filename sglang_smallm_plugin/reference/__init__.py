"""Pure-torch references: the executable specification every kernel is tested against.

Nothing here is fast; everything here is meant to be obviously right. Each function states
the format it reads or writes (see DESIGN.md for the AITER formats) and raises ValueError with
a clear message on bad input.
"""

from .layouts import e8m0_shuffle, e8m0_unshuffle, shuffle_weight, unshuffle_weight
from .moe import fused_moe_fp8_blockscale, fused_moe_mxfp4
from .quant import (
    dequant_fp8_blockscale,
    dequant_mxfp4,
    e8m0_to_float,
    fp4_pack,
    fp4_unpack,
    mxfp4_quant,
    mxfp8_dequant,
    mxfp8_quant,
    mxfp8_scale_roundup,
    quant_fp8_blockscale,
    x_to_f16_per_token,
    h_to_f16_hi_lo_per_pair,
    h_to_f16_hi_e5m2_lo_per_pair,
    mxfp4_tensor_core_weights,
)
from .sorting import (
    moe_align_block_size,
    moe_sorting,
    moe_sorting_mxfp8,
    scale_cols,
    sorted_mxfp8_scales,
    triton_buffer_sizes,
)

__all__ = [
    "shuffle_weight",
    "unshuffle_weight",
    "e8m0_shuffle",
    "e8m0_unshuffle",
    "moe_sorting",
    "moe_align_block_size",
    "moe_sorting_mxfp8",
    "sorted_mxfp8_scales",
    "scale_cols",
    "triton_buffer_sizes",
    "mxfp8_scale_roundup",
    "fused_moe_fp8_blockscale",
    "fused_moe_mxfp4",
    "mxfp8_quant",
    "mxfp8_dequant",
    "mxfp4_quant",
    "quant_fp8_blockscale",
    "dequant_fp8_blockscale",
    "dequant_mxfp4",
    "fp4_pack",
    "fp4_unpack",
    "e8m0_to_float",
    "x_to_f16_per_token",
    "h_to_f16_hi_lo_per_pair",
    "h_to_f16_hi_e5m2_lo_per_pair",
    "mxfp4_tensor_core_weights",
]
