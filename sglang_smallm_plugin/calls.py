"""What a kernel provider is asked to serve: one MoE call or one sort call, described as data.

Built from SGLang's dispatch output, quant info and runner config by the runner core (or
directly by benchmarks and tests), so that providers and the gate never touch SGLang objects.
"""

from dataclasses import dataclass, field
from typing import Optional

import torch

FP8_BLOCK128 = "fp8_block128"
MXFP4 = "mxfp4"
ROW_MAJOR = "row_major"
SHUFFLE16 = "shuffle16x16"


@dataclass
class MoeCall:
    x: torch.Tensor                 # [T, D] activations
    w13: torch.Tensor               # [E, 2Iw, D bytes]   (Iw = I + inter_pad)
    w2: torch.Tensor                # [E, D, Iw bytes]
    w13_scale: Optional[torch.Tensor]
    w2_scale: Optional[torch.Tensor]
    topk_weights: torch.Tensor      # [T, K]
    topk_ids: torch.Tensor          # [T, K]
    weight_format: str              # FP8_BLOCK128 | MXFP4 | "unsupported:<why>"
    layout: str = ROW_MAJOR         # ROW_MAJOR | SHUFFLE16
    activation: str = "silu"
    is_gated: bool = True
    has_bias: bool = False
    has_expert_mask: bool = False
    apply_router_weight_on_input: bool = False
    no_combine: bool = False
    routed_scaling_factor: Optional[float] = None
    swiglu_params: bool = False     # gemm1_alpha / clamp / swiglu_limit set
    block_shape: Optional[tuple] = (128, 128)
    layer_id: Optional[int] = None
    # Zeros SGLang appended to each of gate and up and to w2's K for AITER (its layer.intermediate_pad: Quark
    # MXFP4 pads I = 128 to 256): the weights hold I + inter_pad, the call computes I and never reads the rest
    inter_pad: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return int(self.x.shape[0]) if self.x.dim() >= 1 else 0

    @property
    def top_k(self) -> int:
        return int(self.topk_ids.shape[1]) if self.topk_ids.dim() == 2 else 0

    @property
    def num_experts(self) -> int:
        return int(self.w13.shape[0])

    @property
    def hidden(self) -> int:
        return int(self.x.shape[-1])

    @property
    def inter(self) -> int:
        """The intermediate size the call computes (the weights' less SGLang's padding)."""
        return self.inter_stored - self.inter_pad

    @property
    def inter_stored(self) -> int:
        """The intermediate size the weights are stored with (gate and up rows each, w2's K)."""
        return int(self.w13.shape[1]) // 2 if self.w13.dim() == 3 else 0

    @property
    def device(self) -> torch.device:
        return self.x.device

    def shape_key(self) -> tuple:
        """What identifies a layer shape in logs (tokens excluded)."""
        return (self.layer_id, self.weight_format, self.layout, self.num_experts, self.hidden, self.inter, self.top_k)


AITER_SORT = "aiter"    # moe_sorting: packed (slot << 24) | token ids, weights, [rows, tokens]
TRITON_SORT = "triton"  # moe_align_block_size: flat pair ids, SGLang's "+1" bucket convention


@dataclass
class SortCall:
    topk_ids: torch.Tensor
    topk_weights: Optional[torch.Tensor]
    num_experts: int
    block_size: int
    output_format: str               # AITER_SORT | TRITON_SORT
    has_expert_mask: bool = False
    local_token_count: bool = False
    fuse_mxfp8_of: Optional[torch.Tensor] = None   # activations [T, D] to quantise in the same launch
    moe_buf: Optional[tuple] = None                 # (shape, dtype) of AITER's zeroed output buffer
    extra: dict = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return int(self.topk_ids.shape[0]) if self.topk_ids.dim() == 2 else 0

    @property
    def top_k(self) -> int:
        return int(self.topk_ids.shape[1]) if self.topk_ids.dim() == 2 else 0

    @property
    def num_pairs(self) -> int:
        return int(self.topk_ids.numel())


@dataclass
class SortOutput:
    sorted_ids: torch.Tensor
    expert_ids: torch.Tensor
    num_valid: torch.Tensor                 # AITER: [rows, tokens]; Triton: [rows]
    sorted_weights: Optional[torch.Tensor] = None
    moe_buf: Optional[torch.Tensor] = None
    xq: Optional[torch.Tensor] = None       # fused MXFP8 values [T, D] e4m3fn
    xs: Optional[torch.Tensor] = None       # fused MXFP8 sorted scales (e8m0 bytes)

    def as_tuple(self, output_format: str) -> tuple:
        if output_format == TRITON_SORT:
            return self.sorted_ids, self.expert_ids, self.num_valid
        return self.sorted_ids, self.sorted_weights, self.expert_ids, self.num_valid, self.moe_buf
