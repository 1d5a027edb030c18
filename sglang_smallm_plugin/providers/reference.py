"""The pure-torch reference as a provider: serves CPU tensors (tests, demo on CPU) and GPU tensors
only when SGLANG_SMALLM_REFERENCE=1 asks for it explicitly. Never chosen silently on a GPU."""

import torch

from .. import envs, reference
from ..calls import AITER_SORT, FP8_BLOCK128, MXFP4, ROW_MAJOR, SHUFFLE16, MoeCall, SortCall, SortOutput


class ReferenceMoeProvider:
    name = "reference"
    priority = 0

    def available(self, device) -> tuple:
        if str(device).startswith("cpu"):
            return True, "CPU tensors"
        if envs.REFERENCE.enabled():
            return True, f"{envs.REFERENCE.name}=1 (slow, debugging only)"
        return False, f"GPU tensors need {envs.REFERENCE.name}=1 to use the slow reference"

    def supports(self, call: MoeCall) -> tuple:
        ok, why = self.available(call.device)
        if not ok:
            return False, why
        if call.weight_format not in (FP8_BLOCK128, MXFP4):
            return False, f"weight format {call.weight_format} has no reference"
        if call.layout not in (ROW_MAJOR, SHUFFLE16):
            return False, f"weight layout {call.layout} has no reference (row-major or AITER (16,16) shuffle only)"
        if not (call.activation == "silu" and call.is_gated) or call.has_bias or call.swiglu_params:
            return False, "reference covers gated SiLU without bias or swiglu limits only"
        if call.has_expert_mask or call.apply_router_weight_on_input or call.no_combine:
            return False, "reference covers plain top-k combine only"
        return True, why

    def run(self, call: MoeCall):
        fn = reference.fused_moe_fp8_blockscale if call.weight_format == FP8_BLOCK128 else reference.fused_moe_mxfp4
        return fn(call.x, call.w13, call.w2, call.w13_scale, call.w2_scale, call.topk_weights, call.topk_ids,
                  shuffled=call.layout == SHUFFLE16, routed_scaling_factor=call.routed_scaling_factor,
                  inter=call.inter)


class ReferenceSortProvider:
    name = "reference-sort"
    priority = 0

    def available(self, device) -> tuple:
        return (True, "CPU tensors") if str(device).startswith("cpu") else (False, "reference sort serves CPU tensors only")

    def supports(self, call: SortCall) -> tuple:
        ok, why = self.available(call.topk_ids.device)
        if not ok:
            return ok, why
        if call.has_expert_mask or call.local_token_count:
            return False, "expert mask / local token count not covered"
        return True, why

    def run(self, call: SortCall) -> SortOutput:
        if call.output_format == AITER_SORT:
            if call.fuse_mxfp8_of is not None:
                sid, sw, eids, nv, xq, xs = reference.moe_sorting_mxfp8(
                    call.topk_ids, call.topk_weights, call.fuse_mxfp8_of, call.num_experts, call.block_size)
            else:
                sid, sw, eids, nv = reference.moe_sorting(call.topk_ids, call.topk_weights, call.num_experts,
                                                          call.block_size)
                xq = xs = None
            buf = None
            if call.moe_buf is not None:
                shape, dtype = call.moe_buf
                buf = torch.zeros(shape, dtype=dtype, device=call.topk_ids.device)
            return SortOutput(sorted_ids=sid, expert_ids=eids, num_valid=nv, sorted_weights=sw, moe_buf=buf,
                              xq=xq, xs=xs)
        sid, eids, n = reference.moe_align_block_size(call.topk_ids, call.num_experts, call.block_size)
        return SortOutput(sorted_ids=sid, expert_ids=eids, num_valid=n)
