"""The MI355X path through SGLang's own code, on CPU. FP8: SGLang 0.5.23's Fp8MoEMethod as it runs on ROCm with
SGLANG_USE_AITER=1 (its module flags `_is_hip` and `_use_aiter` set, AITER's `shuffle_weight` the package's
reference one, which examples/aiter_layout_check.py found byte-equal to AITER's own), and an `aiter` stand-in
whose `fused_moe` records its arguments and computes the MoE from the shuffled weights it is given. With
--moe-runner-backend smallm: SGLang builds its AITER runner as the fallback, shuffles the weights for it (the
plugin reads the layout from the bytes: shuffled, as SGLang's flag also says), the kernel (the reference
provider on CPU) serves the calls within the cap and gives the loop reference's output, and the calls the gate
hands over reach AITER's fused_moe with exactly what SGLang passes it without the plugin. MXFP4: the same for
SGLang's Quark W4A4 MXFP4 scheme on gfx950 with AITER (its weights shuffled and scales e8m0_shuffle'd by SGLang,
its quant info holding float4_e2m1fn_x2 views of the weights, gate/up SEPARATED)."""

import enum
import sys
import types

import pytest
import torch

from moe_loop import loop_moe
from sglang_smallm_plugin import reference as R
from sglang_smallm_plugin.calls import SHUFFLE16
from sglang_smallm_plugin.shapes import MoeShape
from sglang_smallm_plugin.tolerances import TOLERANCES, rel_l2

SHAPE = MoeShape("small", 256, 9, 4, 128, 1)



@pytest.fixture(autouse=True)
def _fresh_log_record(monkeypatch):
    """The layout finding is logged once per process for all layers that share it: each test starts afresh."""
    from sglang_smallm_plugin import runner

    monkeypatch.setattr(runner, "_logged", set())

class ActivationType(enum.Enum):
    Silu = "Silu"
    Swiglu = "Swiglu"
    Situv2 = "Situv2"
    Gelu = "Gelu"


class GateMode(enum.Enum):
    SEPARATED = 0
    INTERLEAVE = 1


class QuantType(enum.Enum):
    No = "No"
    per_Token = "per_Token"
    per_128x128 = "per_128x128"
    per_1x32 = "per_1x32"


def _aiter_standin(monkeypatch, calls):
    """`aiter`, `aiter.fused_moe` (fused_moe records its arguments and computes the MoE from the shuffled weights
    it is given, by the package's reference) and `aiter.ops.flydsl.moe_common.GateMode`, in sys.modules."""

    def fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, quant_type=QuantType.No, activation=None,
                  w1_scale=None, w2_scale=None, a1_scale=None, a2_scale=None, bias1=None, bias2=None,
                  expert_mask=None, doweight_stage1=False, hidden_pad=0, intermediate_pad=0, **extra):
        calls.append(dict(tokens=hidden_states.shape[0], w1=w1, w2=w2, quant_type=quant_type, activation=activation,
                          w1_scale=w1_scale, w2_scale=w2_scale, expert_mask=expert_mask, a1_scale=a1_scale,
                          bias=(bias1, bias2), pads=(hidden_pad, intermediate_pad), extra=extra))
        ref = R.fused_moe_fp8_blockscale if quant_type is QuantType.per_128x128 else R.fused_moe_mxfp4
        return ref(hidden_states, w1, w2, w1_scale, w2_scale, topk_weight, topk_ids,
                   shuffled=True).to(hidden_states.dtype)

    mods = {name: types.ModuleType(name) for name in ("aiter", "aiter.fused_moe", "aiter.ops", "aiter.ops.flydsl",
                                                      "aiter.ops.flydsl.moe_common")}
    mods["aiter"].ActivationType, mods["aiter"].QuantType = ActivationType, QuantType
    mods["aiter"].fused_moe = mods["aiter.fused_moe"]
    mods["aiter.fused_moe"].fused_moe = fused_moe
    mods["aiter.ops.flydsl.moe_common"].GateMode = GateMode
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)


@pytest.fixture
def rocm_fp8(sglang_smallm, monkeypatch):
    """(harness, AITER fused_moe calls): SGLang's FP8 MoE method flagged as on ROCm with AITER."""
    from sglang.srt.layers.quantization import fp8 as fp8_mod

    calls = []

    _aiter_standin(monkeypatch, calls)
    monkeypatch.setattr(fp8_mod, "_is_hip", True)
    monkeypatch.setattr(fp8_mod, "_use_aiter", True)
    monkeypatch.setattr(fp8_mod, "shuffle_weight", R.shuffle_weight, raising=False)
    return sglang_smallm, calls


def _layer(harness, seed, layer_id):
    from sglang_smallm_plugin.testdata import make_weights

    w = make_weights(SHAPE, "fp8_block128", "row_major", seed, "cpu")
    return harness.build_layer(SHAPE, "fp8_block128", w, layer_id=layer_id), w


def test_fallback_is_sglangs_aiter_runner_and_weights_are_shuffled_for_it(rocm_fp8, caplog):
    harness, _ = rocm_fp8
    with caplog.at_level("INFO", logger="sglang_smallm"):
        layer, w = _layer(harness, 0, 400)
    core = harness.moe_method(layer).runner.runner_core
    assert core.fallback_backend.value == "aiter" and core.fallback_runner.runner_backend.is_aiter()
    assert getattr(layer.w13_weight, "is_shuffled", False) and core.weight_layout == SHUFFLE16
    assert torch.equal(layer.w13_weight.view(torch.uint8), R.shuffle_weight(w["w13"]).view(torch.uint8))
    assert torch.equal(layer.w2_weight.view(torch.uint8), R.shuffle_weight(w["w2"]).view(torch.uint8))
    assert "layer 400 weights read as shuffle16x16" in caplog.text


@pytest.mark.parametrize("seed", range(3))
def test_calls_within_the_cap_are_the_kernels_on_aiters_layout(rocm_fp8, seed):
    from sglang_smallm_plugin.testdata import make_call

    harness, calls = rocm_fp8
    layer, w = _layer(harness, seed, 410 + seed)
    for T in (1, 3, 8):
        c = make_call(SHAPE, "fp8_block128", "row_major", T, 50 + seed + T, "cpu", w)
        d = harness.decide(layer, c)
        assert d.is_kernel and d.path == "kernel:reference", d
        out = harness.forward(layer, c.x, c.topk_weights, c.topk_ids)
        assert rel_l2(out.float(), loop_moe(c).to(torch.bfloat16).float()) < TOLERANCES["sglang_layer_vs_loop"]
    assert calls == []  # AITER never ran


def test_calls_handed_over_reach_aiter_as_sglang_passes_them(rocm_fp8, monkeypatch):
    """SGLANG_ROCM_SMALLM_MOE=0: every call to the fallback, which is SGLang's AITER runner with SGLang's quant
    info (per_128x128, the shuffled weights, fp32 block scales, SiLU, no mask), and its output is AITER's."""
    from sglang_smallm_plugin.testdata import make_call

    harness, calls = rocm_fp8
    layer, w = _layer(harness, 5, 420)
    monkeypatch.setenv("SGLANG_ROCM_SMALLM_MOE", "0")
    c = make_call(SHAPE, "fp8_block128", "row_major", 3, 7, "cpu", w)
    d = harness.decide(layer, c)
    assert d.path == "fallback:aiter" and "SGLANG_ROCM_SMALLM_MOE=0" in d.reason
    out = harness.forward(layer, c.x, c.topk_weights, c.topk_ids)
    assert len(calls) == 1
    got = calls[0]
    assert got["tokens"] == 3 and got["quant_type"] is QuantType.per_128x128 and got["activation"] is ActivationType.Silu
    assert got["w1"] is layer.w13_weight or got["w1"].data_ptr() == layer.w13_weight.data_ptr()
    assert got["w1_scale"].data_ptr() == layer.w13_weight_scale_inv.data_ptr()
    assert got["w2_scale"].data_ptr() == layer.w2_weight_scale_inv.data_ptr()
    assert got["expert_mask"] is None and got["bias"] == (None, None) and got["a1_scale"] is None
    assert rel_l2(out.float(), loop_moe(c).to(torch.bfloat16).float()) < TOLERANCES["sglang_layer_vs_loop"]


@pytest.fixture
def rocm_mxfp4(sglang_smallm, monkeypatch):
    """(harness, AITER fused_moe calls): SGLang's Quark W4A4 MXFP4 scheme flagged as on gfx950 with AITER."""
    from sglang.srt.layers.quantization.quark.schemes import quark_w4a4_mxfp4_moe as quark_mod

    calls = []
    _aiter_standin(monkeypatch, calls)
    for flag in ("_is_hip", "_use_aiter", "_is_gfx95", "_is_shuffle_moe_mxfp4"):
        monkeypatch.setattr(quark_mod, flag, True)
    monkeypatch.setattr(quark_mod, "shuffle_weight", R.shuffle_weight, raising=False)
    monkeypatch.setattr(quark_mod, "e8m0_shuffle", R.e8m0_shuffle, raising=False)
    return sglang_smallm, calls


def test_mxfp4_fallback_is_aiter_and_weights_and_scales_are_shuffled_for_it(rocm_mxfp4, caplog):
    from sglang_smallm_plugin.testdata import make_weights

    harness, _ = rocm_mxfp4
    w = make_weights(SHAPE, "mxfp4", "row_major", 0, "cpu")
    with caplog.at_level("INFO", logger="sglang_smallm"):
        layer = harness.build_layer(SHAPE, "mxfp4", w, layer_id=430)
    core = harness.moe_method(layer).runner.runner_core
    assert core.fallback_backend.value == "aiter" and core.weight_layout == SHUFFLE16
    # SGLang pads I for AITER (w2's packed K to a multiple of 128 bytes: I = 128 -> 256), gate and up each
    # followed by zeros; the weights are AITER's shuffle of that, the scales e8m0_shuffle'd per expert
    I, Ip = SHAPE.inter, layer.w2_weight.shape[2] * 2
    assert (layer.intermediate_pad, Ip) == (Ip - I, 256)
    w13 = R.unshuffle_weight(layer.w13_weight.data)
    assert torch.equal(w13[:, :I], w["w13"][:, :I]) and torch.equal(w13[:, Ip:Ip + I], w["w13"][:, I:])
    assert not w13[:, I:Ip].any() and not w13[:, Ip + I:].any()
    w2 = R.unshuffle_weight(layer.w2_weight.data)
    assert torch.equal(w2[:, :, :I // 2], w["w2"]) and not w2[:, :, I // 2:].any()
    E, D = SHAPE.experts, SHAPE.hidden
    s2 = R.e8m0_unshuffle(layer.w2_weight_scale.data.reshape(E * D, -1), E * D, I // 32).view(E, D, -1)
    assert torch.equal(s2, w["w2_scale"])
    assert "layer 430 weights read as shuffle16x16" in caplog.text
    assert "layer 430: SGLang padded the intermediate size from 128 to 256 for AITER" in caplog.text


def _poison_padding(layer, I):
    """Overwrite SGLang's zero padding of a shuffled Quark MXFP4 layer (gate rows I.., up rows Ip + I.., w2's K
    past I, and their e8m0 scales) with two e2m1 6.0 per byte and NaN scales, in the layout SGLang left."""
    E, Ip2, _ = layer.w13_weight.shape
    Ip, D = Ip2 // 2, layer.w2_weight.shape[1]
    w13 = R.unshuffle_weight(layer.w13_weight.data.view(torch.uint8))
    w13[:, I:Ip] = 0x77
    w13[:, Ip + I:] = 0x77
    w2 = R.unshuffle_weight(layer.w2_weight.data.view(torch.uint8))
    w2[:, :, I // 2:] = 0x77
    layer.w13_weight.data.view(torch.uint8).copy_(R.shuffle_weight(w13))
    layer.w2_weight.data.view(torch.uint8).copy_(R.shuffle_weight(w2))
    s13 = R.e8m0_unshuffle(layer.w13_weight_scale.data.reshape(E * Ip2, -1), E * Ip2, D // 32).view(E, Ip2, -1)
    s13[:, I:Ip] = 0xFF
    s13[:, Ip + I:] = 0xFF
    s2 = R.e8m0_unshuffle(layer.w2_weight_scale.data.reshape(E * D, -1), E * D, Ip // 32).view(E, D, -1)
    s2[:, :, I // 32:] = 0xFF
    layer.w13_weight_scale.data.view(torch.uint8).copy_(R.e8m0_shuffle(s13.reshape(E * Ip2, -1)).view_as(layer.w13_weight_scale))
    layer.w2_weight_scale.data.view(torch.uint8).copy_(R.e8m0_shuffle(s2.reshape(E * D, -1)).view_as(layer.w2_weight_scale))


@pytest.mark.parametrize("seed", range(3))
def test_mxfp4_padded_layer_is_computed_at_its_own_intermediate_size(rocm_mxfp4, seed):
    """The plugin reads SGLang's layer.intermediate_pad: the calls it describes compute I = 128 over weights
    stored with 256 (the kernel's cap and byte count are I = 128's) and never read the padding, here poisoned
    after SGLang's processing (e2m1 6.0 values, NaN scales): the layer's output is still the loop's."""
    from sglang_smallm_plugin.testdata import make_call, make_weights

    harness, calls = rocm_mxfp4
    w = make_weights(SHAPE, "mxfp4", "row_major", seed, "cpu")
    layer = harness.build_layer(SHAPE, "mxfp4", w, layer_id=450 + seed)
    core = harness.moe_method(layer).runner.runner_core
    assert (core.inter_pad, core.hidden_pad) == (128, 0)
    _poison_padding(layer, SHAPE.inter)
    for T in (1, 5):
        c = make_call(SHAPE, "mxfp4", "row_major", T, 70 + seed + T, "cpu", w)
        d = harness.describe(layer, c)
        assert (d.inter, d.inter_stored, d.inter_pad) == (128, 256, 128)
        assert harness.decide(layer, c).path == "kernel:reference"
        out = harness.forward(layer, c.x, c.topk_weights, c.topk_ids)
        assert rel_l2(out.float(), loop_moe(c).to(torch.bfloat16).float()) < TOLERANCES["sglang_layer_vs_loop"]
    assert calls == []


@pytest.mark.parametrize("seed", range(3))
def test_mxfp4_calls_within_the_cap_are_the_kernels_and_the_rest_aiters(rocm_mxfp4, monkeypatch, seed):
    from sglang_smallm_plugin.testdata import make_call, make_weights

    harness, calls = rocm_mxfp4
    w = make_weights(SHAPE, "mxfp4", "row_major", seed, "cpu")
    layer = harness.build_layer(SHAPE, "mxfp4", w, layer_id=440 + seed)
    for T in (1, 3, 8):
        c = make_call(SHAPE, "mxfp4", "row_major", T, 60 + seed + T, "cpu", w)
        assert harness.decide(layer, c).path == "kernel:reference"
        out = harness.forward(layer, c.x, c.topk_weights, c.topk_ids)
        assert rel_l2(out.float(), loop_moe(c).to(torch.bfloat16).float()) < TOLERANCES["sglang_layer_vs_loop"]
    assert calls == []
    monkeypatch.setenv("SGLANG_ROCM_SMALLM_MOE", "0")
    c = make_call(SHAPE, "mxfp4", "row_major", 3, 90 + seed, "cpu", w)
    out = harness.forward(layer, c.x, c.topk_weights, c.topk_ids)
    assert len(calls) == 1
    got = calls[0]
    assert got["quant_type"] is QuantType.per_1x32 and got["activation"] is ActivationType.Silu
    assert got["extra"]["gate_mode"] == GateMode.SEPARATED.value and got["expert_mask"] is None
    if hasattr(torch, "float4_e2m1fn_x2"):
        assert got["w1"].dtype == torch.float4_e2m1fn_x2 and getattr(got["w1"], "is_shuffled", False)
    assert rel_l2(out.float(), loop_moe(c).to(torch.bfloat16).float()) < TOLERANCES["sglang_layer_vs_loop"]
