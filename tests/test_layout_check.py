"""The weight layout the kernel reads is the one the bytes are in after SGLang's processing, not SGLang's flag
(sglang_integration/layout_check.py): SGLang's own FusedMoE on CPU (FP8 block-scale and Quark MXFP4), its
processing replaced by stand-ins of what SGLang's paths do to the weights (AITER's shuffle with and without the
is_shuffled flag, a layout the kernel does not read, weights rewritten), the layer's output against the
independent loop reference."""

import logging

import pytest
import torch

from moe_loop import loop_moe
from sglang_smallm_plugin import gate
from sglang_smallm_plugin import reference as R
from sglang_smallm_plugin.calls import ROW_MAJOR, SHUFFLE16
from sglang_smallm_plugin.shapes import MoeShape
from sglang_smallm_plugin.tolerances import TOLERANCES, rel_l2

SMALL = MoeShape("small", 256, 9, 4, 128, 1)
FORMATS = ["fp8_block128", "mxfp4"]
SCALES = {"fp8_block128": ("w13_weight_scale_inv", "w2_weight_scale_inv"), "mxfp4": ("w13_weight_scale", "w2_weight_scale")}



@pytest.fixture(autouse=True)
def _fresh_log_record(monkeypatch):
    """The layout finding is logged once per process for all layers that share it: each test starts afresh."""
    from sglang_smallm_plugin import runner

    monkeypatch.setattr(runner, "_logged", set())

def _aiter_like(layer, fmt, *, shuffle=True, flag=True):
    """What SGLang's AITER paths do on gfx950: AITER's (16,16) shuffle of both weights, for MXFP4 also
    e8m0_shuffle of the scales (viewed per expert back), and (on most paths) is_shuffled on the parameters."""
    for name in ("w13_weight", "w2_weight"):
        p = getattr(layer, name)
        if shuffle:
            p.data = R.shuffle_weight(p.data)
        if flag:
            p.is_shuffled = True
    if shuffle and fmt == "mxfp4":
        for name in SCALES[fmt]:
            p = getattr(layer, name)
            s0, s1, _ = p.shape
            p.data = R.e8m0_shuffle(p.data.reshape(s0 * s1, -1)).view(s0, s1, -1)


def _other_permutation(layer, fmt):
    """A layout the kernel does not read (like AITER's gate/up-interleaved a16w4 one): rows reversed inside
    each 16-row tile of w2, w13 shuffled as AITER does."""
    _aiter_like(layer, fmt)
    p = layer.w2_weight
    e, n, k = p.shape
    p.data = p.data.view(e, n // 16, 16, k).flip(2).reshape(e, n, k).contiguous()


def _rewritten(layer, fmt):
    """SGLang replacing the weights by others of another type (as its FP4-experts-to-FP8 path does)."""
    p = layer.w13_weight
    p.data = torch.zeros(p.shape[0], p.shape[1], p.shape[2] * 2, dtype=torch.uint8)


def _processed(sglang_smallm, monkeypatch, fmt, process, seed=3, zero=False):
    """SGLang's FusedMoE for SMALL built with the smallm backend, then processed again through the plugin's
    hook with `process` standing in for SGLang's own method. -> (layer, row-major weights it was loaded with)."""
    from sglang.srt.layers.moe.utils import MoeRunnerBackend

    from sglang_smallm_plugin.sglang_integration import fp8 as fp8_hooks
    from sglang_smallm_plugin.sglang_integration import quark as quark_hooks
    from sglang_smallm_plugin.testdata import make_weights

    w = make_weights(SMALL, fmt, "row_major", seed, "cpu")
    if zero:
        w["w13"].view(torch.uint8).zero_()
        w["w2"].view(torch.uint8).zero_()
    layer = sglang_smallm.build_layer(SMALL, fmt, w, layer_id=300 + seed)
    method = sglang_smallm.moe_method(layer)
    core = method.runner.runner_core
    if fmt == "mxfp4":  # the Quark hook checks where AITER is the fallback (it processes nothing without)
        monkeypatch.setattr(core, "fallback_runner", object())
        monkeypatch.setattr(core, "fallback_backend", MoeRunnerBackend.AITER)
    hooks = fp8_hooks if fmt == "fp8_block128" else quark_hooks
    hooks.around_process_weights_after_loading(lambda self, lyr: process(lyr, fmt), method, layer)
    if fmt == "mxfp4":
        monkeypatch.setattr(core, "fallback_runner", None)  # on CPU the calls themselves have no AITER
        monkeypatch.setattr(core, "fallback_backend", None)
    return layer, w


def _output_error(sglang_smallm, layer, fmt, w, tokens=3, seed=5):
    from sglang_smallm_plugin.testdata import make_call

    call = make_call(SMALL, fmt, "row_major", tokens, seed, "cpu", w)
    out = sglang_smallm.forward(layer, call.x, call.topk_weights, call.topk_ids)
    return rel_l2(out.float(), loop_moe(call).to(torch.bfloat16).float())


def _decision(sglang_smallm, layer, fmt, w):
    from sglang_smallm_plugin.testdata import make_call

    return sglang_smallm.decide(layer, make_call(SMALL, fmt, "row_major", 2, 1, "cpu", w))


def _described(sglang_smallm, layer, fmt, w):
    """The MoeCall the layer's runner core describes for a 2-token call (as layer_harness.decide builds it)."""
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    from sglang_smallm_plugin.sglang_integration.quark import SmallmMxfp4QuantInfo
    from sglang_smallm_plugin.testdata import make_call

    c = make_call(SMALL, fmt, "row_major", 2, 1, "cpu", w)
    dispatch = layer.dispatcher.dispatch(hidden_states=c.x, topk_output=StandardTopKOutput(c.topk_weights, c.topk_ids,
                                                                                           torch.empty(0)))
    qi = SmallmMxfp4QuantInfo.from_layer(layer) if fmt == "mxfp4" else layer.quant_method.get_triton_quant_info(layer)
    core = _core(sglang_smallm, layer)
    return core.describe(dispatch, qi, core.config)


def _core(sglang_smallm, layer):
    return sglang_smallm.moe_method(layer).runner.runner_core


def test_untouched_weights_read_row_major(sglang_smallm, caplog):
    """SGLang's own processing for the Triton fallback (CPU, CUDA) leaves the FP8 weights as loaded."""
    from sglang_smallm_plugin.testdata import make_weights

    w = make_weights(SMALL, "fp8_block128", "row_major", 1, "cpu")
    with caplog.at_level("INFO", logger="sglang_smallm"):
        layer = sglang_smallm.build_layer(SMALL, "fp8_block128", w, layer_id=299)
    assert _core(sglang_smallm, layer).weight_layout == ROW_MAJOR
    assert "layer 299 weights read as row_major (expert 0's weights and scales" in caplog.text


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("flag", [True, False], ids=["flag", "no-flag"])
def test_aiter_shuffle_read_as_shuffled_with_or_without_flag(sglang_smallm, monkeypatch, caplog, fmt, flag):
    """AITER's shuffle: the kernel reads the weights shuffled, also where SGLang did not set is_shuffled (its
    FP8 method's FP4-experts-dequantised branch shuffles without it); the layer's output is right either way."""
    with caplog.at_level("INFO", logger="sglang_smallm"):
        layer, w = _processed(sglang_smallm, monkeypatch, fmt, lambda lyr, f: _aiter_like(lyr, f, flag=flag))
    assert _core(sglang_smallm, layer).weight_layout == SHUFFLE16
    warned = "is_shuffled flag says row_major" in caplog.text
    assert warned == (not flag), caplog.text
    assert _decision(sglang_smallm, layer, fmt, w).is_kernel
    assert _output_error(sglang_smallm, layer, fmt, w) < TOLERANCES["sglang_layer_vs_loop"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_without_the_check_the_flag_alone_gives_a_wrong_answer(sglang_smallm, monkeypatch, fmt):
    """The case the check exists for, shown to matter: shuffled bytes without the flag, read by the flag."""
    layer, w = _processed(sglang_smallm, monkeypatch, fmt, lambda lyr, f: _aiter_like(lyr, f, flag=False))
    monkeypatch.setattr(_core(sglang_smallm, layer), "weight_layout", None)
    if fmt == "mxfp4":  # its shuffled scales are padded to 8 columns: the row-major reading refuses them
        with pytest.raises((ValueError, RuntimeError)):
            _output_error(sglang_smallm, layer, fmt, w)
    else:
        assert _output_error(sglang_smallm, layer, fmt, w) > 0.5


@pytest.mark.parametrize("fmt", FORMATS)
def test_flag_without_shuffle_reads_row_major(sglang_smallm, monkeypatch, caplog, fmt):
    with caplog.at_level("INFO", logger="sglang_smallm"):
        layer, w = _processed(sglang_smallm, monkeypatch, fmt, lambda lyr, f: _aiter_like(lyr, f, shuffle=False))
    assert _core(sglang_smallm, layer).weight_layout == ROW_MAJOR
    assert "is_shuffled flag says shuffle16x16" in caplog.text
    assert _output_error(sglang_smallm, layer, fmt, w) < TOLERANCES["sglang_layer_vs_loop"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("process, detail", [(_other_permutation, "w2_weight is in neither row-major nor AITER's"),
                                             (_rewritten, "changed w13_weight from")], ids=["other-layout", "rewritten"])
def test_unrecognised_layout_sends_every_call_to_the_fallback(sglang_smallm, monkeypatch, caplog, fmt, process,
                                                               detail):
    with caplog.at_level("WARNING", logger="sglang_smallm"):
        layer, w = _processed(sglang_smallm, monkeypatch, fmt, process)
    layout = _core(sglang_smallm, layer).weight_layout
    assert layout.startswith("unrecognised") and detail in layout, layout
    assert "every call of this layer goes to the fallback" in caplog.text
    if process is _rewritten:
        return  # the layer's weights are no longer a valid call for the gate's other rules either
    d = _decision(sglang_smallm, layer, fmt, w)  # on CPU the reference provider is the one that could serve
    assert not d.is_kernel and f"reference: weight layout unrecognised" in d.reason and detail in d.reason, d.reason
    call = _described(sglang_smallm, layer, fmt, w)  # the compiled kernel's gate, as on an MI355X or H200
    for arch in ("gfx950", "sm_90"):
        ok, why = gate.evaluate(call, arch)
        assert not ok and why.startswith("layout: unrecognised") and detail in why, why


def test_bytes_the_same_in_both_layouts_leave_it_to_the_flag(sglang_smallm, monkeypatch, caplog):
    """All-zero FP8 weights read the same shuffled or not (FP8 scales are never shuffled): the flag decides,
    and the log says why."""
    with caplog.at_level("INFO", logger="sglang_smallm"):
        layer, w = _processed(sglang_smallm, monkeypatch, "fp8_block128",
                              lambda lyr, f: _aiter_like(lyr, f, shuffle=False), zero=True)
    assert _core(sglang_smallm, layer).weight_layout is None
    assert "read the same in every layout" in caplog.text and "read as shuffle16x16 (SGLang's is_shuffled flag)" in caplog.text
    assert _decision(sglang_smallm, layer, "fp8_block128", w).is_kernel


def test_mxfp4_scales_decide_where_the_weights_cannot(sglang_smallm, monkeypatch, caplog):
    """All-zero MXFP4 weights, scales as loaded and the flag set: the scales say row-major, and they win."""
    with caplog.at_level("INFO", logger="sglang_smallm"):
        layer, w = _processed(sglang_smallm, monkeypatch, "mxfp4", lambda lyr, f: _aiter_like(lyr, f, shuffle=False),
                              zero=True)
    assert _core(sglang_smallm, layer).weight_layout == ROW_MAJOR
    assert "is_shuffled flag says shuffle16x16" in caplog.text


def test_the_finding_is_logged_once_for_all_layers_that_share_it(sglang_smallm, caplog):
    """A model's MoE layers share their layout: one line at startup, not one per layer."""
    from sglang_smallm_plugin.testdata import make_weights

    w = make_weights(SMALL, "fp8_block128", "row_major", 2, "cpu")
    with caplog.at_level("INFO", logger="sglang_smallm"):
        layers = [sglang_smallm.build_layer(SMALL, "fp8_block128", w, layer_id=i) for i in (350, 351, 352)]
    assert all(_core(sglang_smallm, lyr).weight_layout == ROW_MAJOR for lyr in layers)
    assert caplog.text.count("weights read as row_major") == 1 and "layer 350 weights read as" in caplog.text
