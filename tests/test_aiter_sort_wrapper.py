"""The AITER sort wrapper (ROCm path) against a stand-in `aiter.fused_moe` with the same entry
points and call order (sort, then the MXFP8 quantisation of the activations), plus a stand-in of
SGLang's own small-sort patch applied first. No AITER exists here; what is checked is composition:
ours outermost, never twice, declined calls reaching SGLang's patch and then AITER unchanged, and
the fused quantisation handed back only for the tensors it was made from. The last tests apply SGLang 0.5.23's
own patch (`apply_aiter_small_moe_sort_patch`, its code) under ours instead of a stand-in of it."""

import functools
import types

import pytest
import torch

from sglang_smallm_plugin import reference as R


def _fake_aiter(log):
    fm = types.ModuleType("aiter_fused_moe_standin")

    def _moe_sorting_impl(topk_ids, topk_weights, num_experts, model_dim, moebuf_dtype, block_size, expert_mask,
                          num_local_tokens, dispatch_policy, use_opus, return_local_topk_ids=False, accumulate=True,
                          output_aux=False, **kwargs):
        log.append("aiter_sort")
        return ("aiter-sort-result",)

    def fused_dynamic_mxfp8_quant_moe_sort(input, sorted_ids, *args, **kwargs):
        log.append("aiter_quant")
        return ("aiter-quant-result",)

    def fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, expert_mask=None, num_experts=129, quant_type=None):
        s = fm._moe_sorting_impl(topk_ids, topk_weight, num_experts, hidden_states.shape[1], torch.bfloat16, 32,
                                 expert_mask, None, 0, False)
        q = fm.fused_dynamic_mxfp8_quant_moe_sort(hidden_states, s[0], hidden_states.shape[0], 32)
        return s, q

    fm._moe_sorting_impl = _moe_sorting_impl
    fm.fused_dynamic_mxfp8_quant_moe_sort = fused_dynamic_mxfp8_quant_moe_sort
    fm.fused_moe = fused_moe
    # SGLang's own patch, applied when it builds its AITER runner core: wraps the sort, passes through here.
    inner = fm._moe_sorting_impl

    @functools.wraps(inner)
    def sglang_patch(*a, **k):
        log.append("sglang_sort")
        return inner(*a, **k)

    fm._moe_sorting_impl = sglang_patch
    return fm


@pytest.fixture
def wrapped(sglang_smallm):
    from sglang_smallm_plugin.sglang_integration import sort

    log = []
    fm = _fake_aiter(log)
    sglang_layer = fm._moe_sorting_impl
    what = sort.install_aiter_sort_wrapper(fm)
    return fm, log, sglang_layer, what


class _QuantType:  # stand-in of aiter.QuantType members (only .name is read)
    def __init__(self, name):
        self.name = name


PER_1X32, PER_1X128 = _QuantType("per_1x32"), _QuantType("per_1x128")
W_FP4 = torch.zeros(129, 8, 32, dtype=torch.uint8)


def _inputs(T=3, K=5, E=129, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)
    w = torch.rand(T, K, generator=g)
    x = (torch.randn(T, D, generator=g) * 3).to(torch.bfloat16)
    return x, ids, w


def test_ours_is_outermost_over_sglangs_patch_and_never_twice(wrapped):
    from sglang_smallm_plugin.sglang_integration import sort

    fm, _, sglang_layer, what = wrapped
    assert what.startswith("wrapped (outermost")
    assert fm._moe_sorting_impl.__wrapped__ is sglang_layer
    before = (fm._moe_sorting_impl, fm.fused_moe, fm.fused_dynamic_mxfp8_quant_moe_sort)
    assert sort.install_aiter_sort_wrapper(fm) == "already wrapped"
    assert (fm._moe_sorting_impl, fm.fused_moe, fm.fused_dynamic_mxfp8_quant_moe_sort) == before


@pytest.mark.parametrize("seed", range(3))
def test_eligible_call_is_served_by_our_sort_with_the_fused_quantisation(wrapped, seed):
    fm, log, _, _ = wrapped
    x, ids, w = _inputs(seed=seed)
    (sid, sw, eids, nv, buf), (xq, xs) = fm.fused_moe(x, W_FP4, None, w, ids, quant_type=PER_1X32)
    assert log == []  # neither SGLang's patch nor AITER ran
    rid, rw, reid, rnv, rxq, rxs = R.moe_sorting_mxfp8(ids, w, x, 129, 32)
    n = int(rnv[0])
    assert torch.equal(nv, rnv) and torch.equal(sid[:n], rid[:n]) and torch.equal(sw[:n], rw[:n])
    assert torch.equal(eids[:n // 32], reid[:n // 32])
    assert torch.equal(xq.view(torch.uint8), rxq.view(torch.uint8))
    assert xs.dtype == torch.float8_e8m0fnu and torch.equal(xs.view(torch.uint8)[:n], rxs[:n])
    assert buf.shape == (3, 64) and bool((buf == 0).all())


def test_declined_call_reaches_sglangs_patch_then_aiter(wrapped):
    fm, log, _, _ = wrapped
    x, ids, w = _inputs()
    s, q = fm.fused_moe(x, W_FP4, None, w, ids, expert_mask=torch.ones(129, dtype=torch.int32), quant_type=PER_1X32)
    assert s == ("aiter-sort-result",) and q == ("aiter-quant-result",)
    assert log == ["sglang_sort", "aiter_sort", "aiter_quant"]


def test_kernels_off_falls_through(wrapped, monkeypatch):
    monkeypatch.setenv("SGLANG_ROCM_SMALLM_MOE", "0")
    fm, log, _, _ = wrapped
    x, ids, w = _inputs()
    assert fm.fused_moe(x, W_FP4, None, w, ids, quant_type=PER_1X32) == (("aiter-sort-result",), ("aiter-quant-result",))
    assert log == ["sglang_sort", "aiter_sort", "aiter_quant"]


def test_quantisation_handed_back_only_for_its_own_tensors(wrapped):
    fm, log, _, _ = wrapped
    x, ids, w = _inputs()
    other = x.clone()
    assert fm.fused_dynamic_mxfp8_quant_moe_sort(other, torch.zeros(4, dtype=torch.int32)) == ("aiter-quant-result",)
    assert log == ["aiter_quant"]


def test_no_aiter_means_nothing_to_wrap():
    from sglang_smallm_plugin.sglang_integration import sort

    assert sort.install_aiter_sort_wrapper(types.ModuleType("empty")).endswith("sort not wrapped")


def test_no_fusion_unless_aiter_wants_mxfp8_activations(wrapped):
    """FP8 block-scale calls (per_1x128) keep AITER's own activation quantisation; the sort is ours."""
    fm, log, _, _ = wrapped
    x, ids, w = _inputs()
    (sid, sw, eids, nv, buf), q = fm.fused_moe(x, W_FP4, None, w, ids, quant_type=PER_1X128)
    assert q == ("aiter-quant-result",) and log == ["aiter_quant"]
    rid, rw, reid, rnv = R.moe_sorting(ids, w, 129, 32)
    assert torch.equal(nv, rnv) and torch.equal(sid[:int(rnv[0])], rid[:int(rnv[0])])


def test_installed_when_the_aiter_fallback_runner_is_built(sglang_smallm, monkeypatch):
    """build_smallm_runner calls after_fallback_built once SGLang's AITER runner (and so SGLang's own
    sort patch) exists; a Triton fallback leaves AITER alone."""
    import sys

    from sglang.srt.layers.moe.utils import MoeRunnerBackend

    from sglang_smallm_plugin.sglang_integration import sort

    log = []
    fm = _fake_aiter(log)
    monkeypatch.setitem(sys.modules, "aiter", types.ModuleType("aiter"))
    monkeypatch.setitem(sys.modules, "aiter.fused_moe", fm)
    before = fm._moe_sorting_impl
    sort.after_fallback_built(MoeRunnerBackend.TRITON)
    assert fm._moe_sorting_impl is before
    sort.after_fallback_built(MoeRunnerBackend.AITER)
    assert fm._moe_sorting_impl is not before and fm._moe_sorting_impl.__wrapped__ is before
    sort.after_fallback_built(MoeRunnerBackend.AITER)  # a second layer: still wrapped once
    assert fm._moe_sorting_impl.__wrapped__ is before


def test_doctor_reports_the_aiter_wrapper(sglang_smallm, monkeypatch):
    import sys

    from sglang_smallm_plugin.sglang_integration import sort

    assert sort.aiter_wrapper_status().startswith("AITER not installed")
    fm = _fake_aiter([])
    aiter = types.ModuleType("aiter")
    aiter.__spec__ = importlib_spec("aiter")
    monkeypatch.setitem(sys.modules, "aiter", aiter)
    monkeypatch.setitem(sys.modules, "aiter.fused_moe", fm)
    assert sort.aiter_wrapper_status().startswith("not wrapped yet")
    sort.install_aiter_sort_wrapper(fm)
    assert sort.aiter_wrapper_status() == "wrapped (outermost)"


def importlib_spec(name):
    import importlib.machinery

    return importlib.machinery.ModuleSpec(name, None)


# ----------------------------------------------------- over SGLang 0.5.23's own patch (its code, not a stand-in)
@pytest.fixture
def over_sglangs_patch(sglang_smallm, monkeypatch):
    """The AITER stand-in patched by SGLang's own `apply_aiter_small_moe_sort_patch` (as SGLang's AITER runner
    applies it on gfx950), then by ours. SGLang's Triton small sort (`_run_small_sort`, GPU only) is replaced by
    a recorder of its arguments, so that what SGLang's real wrapper passes it can be read on CPU."""
    import enum
    import sys

    from sglang.kernels.ops.moe import moe_sorting_small as sgl

    from sglang_smallm_plugin.sglang_integration import sort

    log, sglang_sorts = [], []
    fm = _fake_aiter(log)
    fm._moe_sorting_impl = fm._moe_sorting_impl.__wrapped__  # the stand-in without its own copy of SGLang's patch

    class QuantType(enum.Enum):
        No = 0
        per_1x32 = 1
        per_1x128 = 2

    fm.QuantType = QuantType
    dtypes = types.ModuleType("aiter.dtypes")
    dtypes.fp4x2, dtypes.fp8, dtypes.i32, dtypes.fp32 = torch.uint8, torch.float8_e4m3fn, torch.int32, torch.float32
    aiter = types.ModuleType("aiter")
    aiter.fused_moe, aiter.dtypes = fm, dtypes
    for name, mod in (("aiter", aiter), ("aiter.fused_moe", fm), ("aiter.dtypes", dtypes)):
        monkeypatch.setitem(sys.modules, name, mod)

    def run_small_sort(topk_ids, topk_weights, sorted_ids, sorted_weights, sorted_expert_ids, num_valid_ids, moe_buf,
                       block_size, mx_quant_input, num_experts):
        log.append("sglang_small_sort")
        sglang_sorts.append(dict(moe_buf=tuple(moe_buf.shape), block_size=block_size, num_experts=num_experts,
                                 quant_input=mx_quant_input))
        return None

    monkeypatch.setattr(sgl, "is_gfx95_supported", lambda: True)
    monkeypatch.setattr(sgl, "_run_small_sort", run_small_sort)
    sgl.apply_aiter_small_moe_sort_patch.cache_clear()
    sgl.apply_aiter_small_moe_sort_patch()
    sglang_sort = fm._moe_sorting_impl
    assert sglang_sort.__code__.co_name == "sorting_impl_wrapper", "SGLang's patch did not apply"
    what = sort.install_aiter_sort_wrapper(fm)
    yield fm, log, sglang_sorts, sglang_sort, what, QuantType
    sgl.apply_aiter_small_moe_sort_patch.cache_clear()


def test_over_sglangs_own_patch_ours_is_outermost(over_sglangs_patch):
    fm, _, _, sglang_sort, what, _ = over_sglangs_patch
    assert what == "wrapped (outermost, over SGLang's small-sort patch)"
    assert fm._moe_sorting_impl.__wrapped__ is sglang_sort


@pytest.mark.parametrize("seed", range(2))
def test_over_sglangs_own_patch_eligible_call_is_ours(over_sglangs_patch, seed):
    fm, log, _, _, _, QuantType = over_sglangs_patch
    x, ids, w = _inputs(seed=seed)
    (sid, sw, eids, nv, buf), (xq, xs) = fm.fused_moe(x, W_FP4, None, w, ids, quant_type=QuantType.per_1x32)
    assert log == []  # neither SGLang's small sort nor AITER ran
    rid, rw, reid, rnv, rxq, rxs = R.moe_sorting_mxfp8(ids, w, x, 129, 32)
    n = int(rnv[0])
    assert torch.equal(nv, rnv) and torch.equal(sid[:n], rid[:n]) and torch.equal(xq.view(torch.uint8), rxq.view(torch.uint8))


def test_over_sglangs_own_patch_kernels_off_reach_sglangs_small_sort(over_sglangs_patch, monkeypatch):
    """With the kernels off ours passes every call on: SGLang's real wrapper gets AITER's arguments as AITER gave
    them, takes the call (15 pairs) and sizes its buffers from them."""
    monkeypatch.setenv("SGLANG_ROCM_SMALLM_MOE", "0")
    fm, log, sglang_sorts, _, _, QuantType = over_sglangs_patch
    x, ids, w = _inputs()
    fm.fused_moe(x, W_FP4, None, w, ids, quant_type=QuantType.per_1x32)
    assert log == ["sglang_small_sort", "aiter_quant"]
    assert sglang_sorts == [dict(moe_buf=(3, 64), block_size=32, num_experts=129, quant_input=None)]


def test_over_sglangs_own_patch_declined_by_both_reaches_aiter(over_sglangs_patch):
    fm, log, sglang_sorts, _, _, QuantType = over_sglangs_patch
    x, ids, w = _inputs()
    s, q = fm.fused_moe(x, W_FP4, None, w, ids, expert_mask=torch.ones(129, dtype=torch.int32),
                        quant_type=QuantType.per_1x32)
    assert s == ("aiter-sort-result",) and q == ("aiter-quant-result",)
    assert log == ["aiter_sort", "aiter_quant"] and sglang_sorts == []
