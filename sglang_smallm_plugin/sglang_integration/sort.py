"""Wires the sort wrapper around the sort SGLang's Triton MoE runner calls (CUDA).

AITER's sorting entry points (ROCm) are wrapped by the sort-kernel work (issue 4); until a
compiled sort provider exists there is nothing to route on ROCm, so nothing is patched there.
"""

from ..calls import SortCall
from ..sort_wrapper import wrap_sort
from .runner_core import selected_backend_is_smallm

TRITON_SORT = "sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size.moe_align_block_size"


def _describe_triton(topk_ids, block_size, num_experts, ignore_invalid_expert=False, *,
                     return_inactive_prefix_count=False, pad_expert_ids=False):
    if ignore_invalid_expert or return_inactive_prefix_count or pad_expert_ids:
        return None, "non-default moe_align_block_size options (invalid experts / inactive prefix / padded ids)"
    return SortCall(topk_ids=topk_ids, topk_weights=None, num_experts=int(num_experts),
                    block_size=int(block_size), output_format="triton"), ""


def around_triton_sort(original, *args, **kwargs):
    return wrap_sort(original, _describe_triton, selected_backend_is_smallm)(*args, **kwargs)


HOOKS = ((TRITON_SORT, around_triton_sort),)
