"""The pure-torch reference as a provider: serves CPU tensors (tests, demo on CPU) and GPU tensors
only when SGLANG_SMALLM_REFERENCE=1 asks for it explicitly. Never chosen silently on a GPU."""

from .. import envs, reference
from ..calls import FP8_BLOCK128, MXFP4, SHUFFLE16, MoeCall, SortCall


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
        if not (call.activation == "silu" and call.is_gated) or call.has_bias or call.swiglu_params:
            return False, "reference covers gated SiLU without bias or swiglu limits only"
        if call.has_expert_mask or call.apply_router_weight_on_input or call.no_combine:
            return False, "reference covers plain top-k combine only"
        return True, why

    def run(self, call: MoeCall):
        fn = reference.fused_moe_fp8_blockscale if call.weight_format == FP8_BLOCK128 else reference.fused_moe_mxfp4
        return fn(call.x, call.w13, call.w2, call.w13_scale, call.w2_scale, call.topk_weights, call.topk_ids,
                  shuffled=call.layout == SHUFFLE16, routed_scaling_factor=call.routed_scaling_factor)


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

    def run(self, call: SortCall):
        if call.output_format == "aiter":
            return reference.moe_sorting(call.topk_ids, call.topk_weights, call.num_experts, call.block_size)
        return reference.moe_align_block_size(call.topk_ids, call.num_experts, call.block_size)
