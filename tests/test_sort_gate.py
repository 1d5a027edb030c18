"""The sort gate's decisions for the issue's shapes, as data with reasons (CPU, meta tensors)."""

import pytest
import torch

from sglang_smallm_plugin import sort_gate
from sglang_smallm_plugin.calls import AITER_SORT, TRITON_SORT, SortCall


def test_qwen35_compact_then_hand_over_at_513_experts():
    rows = sort_gate.decision_table("gfx950", 513, 11, 32, range(1, 30))
    for t, path, why in rows:
        if t * 11 <= 64:
            assert path == "compact", (t, why)
        else:
            assert path is None, (t, why)
            assert "513 experts" in why and "distributed needs pairs <= 256 and experts <= 256" in why


def test_minimax_compact_then_distributed_then_hand_over():
    got = {t: path for t, path, _ in sort_gate.decision_table("gfx950", 129, 5, 32, range(1, 60))}
    assert all(got[t] == "compact" for t in range(1, 13))
    assert all(got[t] == "distributed" for t in range(13, 52))
    assert all(got[t] is None for t in range(52, 60))


def test_h200_uses_only_the_distributed_sort_where_it_was_measured_faster():
    qwen = sort_gate.decision_table("sm_90", 513, 11, 16, range(1, 30), output_format=TRITON_SORT)
    assert all(path is None for _, path, _ in qwen)  # compact loses to SGLang's Triton sort; E > 256
    mm = {t: (p, why) for t, p, why in sort_gate.decision_table("sm_90", 129, 5, 16, range(1, 60), TRITON_SORT)}
    assert all(mm[t][0] is None for t in range(1, 7))        # <= 32 pairs: SGLang's single launch wins
    assert all(mm[t][0] == "distributed" for t in range(7, 52))
    assert all(mm[t][0] is None for t in range(52, 60))
    assert "H200" in mm[7][1]


def test_compact_limit_is_min_64_and_two_blocks():
    assert [sort_gate.compact_limit(b) for b in (8, 16, 32, 64, 128)] == [16, 32, 64, 64, 64]
    rows = dict((t, p) for t, p, _ in sort_gate.decision_table("gfx950", 513, 11, 16, (1, 2, 3)))
    assert rows == {1: "compact", 2: "compact", 3: None}  # 33 pairs > 2 x 16


def _call(**kw):
    ids = torch.zeros(4, 5, dtype=torch.int32)
    base = dict(topk_ids=ids, topk_weights=torch.zeros(4, 5), num_experts=129, block_size=32, output_format=AITER_SORT)
    base.update(kw)
    return SortCall(**base)


@pytest.mark.parametrize("mutate,rule", [
    (dict(has_expert_mask=True), "expert_mask"),
    (dict(local_token_count=True), "local_token_count"),
    (dict(topk_ids=torch.zeros(4, 5, dtype=torch.int64)), "ids"),
    (dict(topk_ids=torch.zeros(5, 4, dtype=torch.int32).t()), "ids"),
    (dict(topk_weights=torch.zeros(4, 5, dtype=torch.bfloat16)), "weights"),
    (dict(topk_ids=torch.zeros(0, 5, dtype=torch.int32), topk_weights=torch.zeros(0, 5)), "shape"),
    (dict(fuse_mxfp8_of=torch.zeros(4, 64, dtype=torch.float16)), "fused_mxfp8"),
    (dict(fuse_mxfp8_of=torch.zeros(4, 64, dtype=torch.bfloat16), block_size=16), "fused_mxfp8"),
    (dict(fuse_mxfp8_of=torch.zeros(4, 64, dtype=torch.bfloat16), output_format=TRITON_SORT), "fused_mxfp8"),
    (dict(moe_buf=((3, 3), torch.bfloat16)), "moe_buf"),
    (dict(output_format="other"), "format"),
])
def test_ineligible_calls_hand_over_with_their_reason(mutate, rule):
    path, why = sort_gate.choose_path(_call(**mutate), "gfx950")
    assert path is None and why.startswith(rule + ":"), why


def test_unknown_device_hands_over():
    path, why = sort_gate.choose_path(_call(), "gfx942")
    assert path is None and why.startswith("device:")


def test_eligible_call_names_its_path_and_source():
    path, why = sort_gate.choose_path(_call(fuse_mxfp8_of=torch.zeros(4, 64, dtype=torch.bfloat16),
                                            moe_buf=((4, 64), torch.bfloat16)), "gfx950")
    assert path == "compact" and "upstream MI355X" in why


def test_kernel_path_ignores_device_tables_but_not_kernel_limits():
    def call(T, K, E, bs=16):
        return SortCall(topk_ids=torch.empty(T, K, dtype=torch.int32, device="meta"), topk_weights=None,
                        num_experts=E, block_size=bs, output_format=TRITON_SORT)

    assert sort_gate.kernel_path(call(2, 11, 513)) == "compact"      # sm_90's table hands this over
    assert sort_gate.kernel_path(call(8, 5, 129)) == "distributed"
    assert sort_gate.kernel_path(call(3, 11, 513)) is None            # 33 pairs > 32, E > 256
    assert sort_gate.kernel_path(call(52, 5, 129)) is None            # 260 pairs > 256
