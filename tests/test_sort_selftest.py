"""The sort self-test's comparator (what the H200 runs rely on), checked on CPU: it accepts an exact
output with untouched tails and names each kind of defect."""

import pytest
import torch

from sglang_smallm_plugin import sort_selftest as S
from sglang_smallm_plugin.calls import AITER_SORT, TRITON_SORT, SortCall
from sglang_smallm_plugin.providers.reference import ReferenceSortProvider


def _exact(call):
    """The reference output, with S's poison where a kernel writes nothing."""
    out = S._poisoned(ReferenceSortProvider().run(call))
    ref = ReferenceSortProvider().run(call)
    n = int(ref.num_valid[0])
    out.num_valid.copy_(ref.num_valid)
    out.sorted_ids[:n] = ref.sorted_ids[:n]
    out.expert_ids[:n // call.block_size] = ref.expert_ids[:n // call.block_size]
    if ref.sorted_weights is not None:
        out.sorted_weights[:n] = ref.sorted_weights[:n]
    if ref.xq is not None:
        out.xq.copy_(ref.xq)
        cols = ref.xs.shape[1]
        out.xs.view(-1)[:n * cols] = ref.xs.view(-1)[:n * cols]
    if ref.moe_buf is not None:
        out.moe_buf.zero_()
    return out, n


@pytest.mark.parametrize("fmt,fused", [(AITER_SORT, False), (AITER_SORT, True), (TRITON_SORT, False)])
@pytest.mark.parametrize("seed", range(3))
def test_comparator_accepts_exact_and_rejects_defects(fmt, fused, seed):
    ids, w = S.make_routing(6, 5, 129, "padded", seed, "cpu")
    call = SortCall(topk_ids=ids, topk_weights=w if fmt == AITER_SORT else None, num_experts=129, block_size=32,
                    output_format=fmt, moe_buf=((6, 64), torch.bfloat16) if fmt == AITER_SORT else None)
    if fused:
        call.fuse_mxfp8_of = S.make_activations(6, 64, seed, "cpu")
    out, n = _exact(call)
    assert S._compare(call, out) == []
    out.sorted_ids[n] = 0  # a write past the padded length
    assert "sorted_ids written past the padded length" in S._compare(call, out)
    out, n = _exact(call)
    out.expert_ids[0] += 1
    assert "expert ids per block differ" in S._compare(call, out)
    out, n = _exact(call)
    out.num_valid[0] += 32
    assert S._compare(call, out)[0].startswith("num_valid")
    if fused:
        out, n = _exact(call)
        out.xq.view(torch.uint8)[0, 0] ^= 1
        assert "MXFP8 values differ" in S._compare(call, out)
        out, n = _exact(call)
        out.xs.view(-1)[0] ^= 1
        assert "MXFP8 sorted scales differ" in S._compare(call, out)
