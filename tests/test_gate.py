"""Every fallback case is routed to the fallback with its reason, through SGLang's real runner
objects (FusedMoE + Fp8MoEMethod + the smallm core + SGLang's Triton quant info). The compiled
provider is shown an MI355X / H200 so that the gate itself, not the missing GPU, decides."""

import pytest
import torch

from sglang_smallm_plugin import envs, gate, kernels
from sglang_smallm_plugin.providers import compiled
from sglang_smallm_plugin.shapes import MoeShape

SHAPE = MoeShape("gate-test", 256, 9, 4, 128, 1)


@pytest.fixture(params=["gfx950", "sm_90"])
def fake_gpu(request, monkeypatch):
    arch = request.param
    kind = "rocm" if arch.startswith("gfx") else "cuda"
    monkeypatch.setattr(kernels, "device_info", lambda device=None: kernels.DeviceInfo(kind, "fake", arch))
    monkeypatch.setattr(kernels, "load_compiled", lambda: (object(), "fake"))
    monkeypatch.setattr(kernels, "compiled_arch", lambda: "sm_90a" if arch == "sm_90" else arch)
    return arch


@pytest.fixture(scope="module")
def real_objects(sglang_smallm):
    """(layer, core, dispatch_output, quant_info) from SGLang's own objects."""
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    from sglang_smallm_plugin.testdata import make_call, make_weights

    w = make_weights(SHAPE, "fp8_block128", "row_major", 0, "cpu")
    layer = sglang_smallm.build_layer(SHAPE, "fp8_block128", w, layer_id=200)
    core = layer.quant_method.runner.runner_core
    call = make_call(SHAPE, "fp8_block128", "row_major", 3, 0, "cpu", w)
    topk = StandardTopKOutput(call.topk_weights, call.topk_ids, torch.empty(0))
    dispatch = layer.dispatcher.dispatch(hidden_states=call.x, topk_output=topk)
    quant_info = layer.quant_method.get_triton_quant_info(layer)
    return layer, core, dispatch, quant_info


def _decide(core, dispatch, quant_info, config, only_compiled=True):
    """The core's own description of the call; its selector class, holding only the compiled
    provider (on this CPU machine the reference provider would otherwise serve every call)."""
    from sglang_smallm_plugin.runner import MoeSelector

    call = core.describe(dispatch, quant_info, config)
    sel = MoeSelector(core.fallback_backend.value, providers=[compiled.CompiledMoeProvider()]) if only_compiled \
        else core.selector
    sel._cache.clear()
    return sel.decide(call), call


def _with_tokens(dispatch, T):
    from sglang_smallm_plugin.testdata import make_routing

    tw, ti = make_routing(SHAPE, T, 0, "cpu")
    return dispatch._replace(hidden_states=torch.zeros(T, 256, dtype=torch.bfloat16),
                             topk_output=dispatch.topk_output._replace(topk_weights=tw, topk_ids=ti))


def test_eligible_call_goes_to_compiled_kernel(fake_gpu, real_objects):
    layer, core, dispatch, qi = real_objects
    d, _ = _decide(core, _with_tokens(dispatch, 1), qi, core.config)
    assert d.path == "kernel:smallm-compiled", d.reason
    assert "cap" in d.reason


def _replace_dispatch(dispatch, **kw):
    return dispatch._replace(**kw)


def _with(obj, **kw):
    import copy

    o = copy.copy(obj)
    for k, v in kw.items():
        setattr(o, k, v)
    return o


CASES = {
    "tokens": lambda d, q, c: (_replace_dispatch(d, hidden_states=torch.zeros(200, 256, dtype=torch.bfloat16),
                                                 topk_output=d.topk_output._replace(
                                                     topk_weights=torch.ones(200, 4), topk_ids=torch.zeros(200, 4, dtype=torch.int32))), q, c),
    "scales": lambda d, q, c: (d, _with(q, w13_scale=torch.ones(9, 256, 1), w2_scale=torch.ones(9, 256, 1)), c),
    "scales_noncontig": lambda d, q, c: (d, _with(q, w13_scale=q.w13_scale.transpose(1, 2).contiguous().transpose(1, 2)
                                                 if q.w13_scale.shape[1] != q.w13_scale.shape[2] else
                                                 q.w13_scale.repeat(1, 1, 2)[:, :, ::2]), c),
    "layout": None,  # set below (needs a call attribute)
    "expert_mask": lambda d, q, c: (d, _with(q, expert_mask=torch.ones(9, dtype=torch.int32)), c),
    "bias": lambda d, q, c: (d, _with(q, b13=torch.zeros(9, 256)), c),
    "activation": lambda d, q, c: (d, q, _with(c, activation="gelu")),
    "x": lambda d, q, c: (_replace_dispatch(d, hidden_states=d.hidden_states.float()), q, c),
    # contiguous bf16 whose data starts 2 bytes into its storage: not 16-byte aligned
    "alignment": lambda d, q, c: (_replace_dispatch(d, hidden_states=torch.zeros(
        d.hidden_states.numel() + 1, dtype=torch.bfloat16)[1:].view(d.hidden_states.shape)), q, c),
    "topk": lambda d, q, c: (_replace_dispatch(d, topk_output=d.topk_output._replace(topk_ids=d.topk_output.topk_ids.long())), q, c),
    "router_weight_on_input": lambda d, q, c: (d, q, _with(c, apply_router_weight_on_input=True)),
    "swiglu_params": lambda d, q, c: (d, q, _with(c, swiglu_limit=7.0)),
    "weight_format": lambda d, q, c: (d, _with(q, use_fp8_w8a8=False), c),
    "block_shape": lambda d, q, c: (d, _with(q, block_shape=[64, 64]), c),
}


@pytest.mark.parametrize("case", [k for k in CASES if CASES[k] is not None])
def test_fallback_cases_have_reasons(fake_gpu, real_objects, case):
    layer, core, dispatch, qi = real_objects
    d2, q2, c2 = CASES[case](dispatch, qi, core.config)
    decision, call = _decide(core, d2, q2, c2)
    assert decision.path == "fallback:triton", (case, decision)
    assert case.split("_noncontig")[0] in decision.reason or (case == "scales_noncontig" and "scales" in decision.reason), decision.reason


def test_unsupported_layout_falls_back(fake_gpu, real_objects):
    layer, core, dispatch, qi = real_objects
    call = core.describe(dispatch, qi, core.config)
    call.layout = "shuffle32x16"
    ok, why = compiled.CompiledMoeProvider().supports(call)
    assert not ok and why.startswith("layout:")


@pytest.mark.parametrize("hidden, inter, experts, top_k, why", [
    (4096, 256, 513, 11, ""),                                           # Qwen3.5 TP4
    (4000, 256, 513, 11, "D (4000) and I (256) must be positive multiples of 128"),
    (4096, 2048, 128, 8, "I (2048) is over the kernel's 1024"),
    (4096, 384, 2048, 8, "E (2048) must be 1 to the kernel's 1024 experts"),
    (4096, 384, 128, 17, "K (17) must be 1 to 16 slots"),
])
def test_shape_rule_is_shape_problem(fake_gpu, hidden, inter, experts, top_k, why):
    """The gate's "shape" rule and the spec check of bench/selftest (shapes.py) share gate.shape_problem; the
    rule's reason is its words. (A MoeCall's shape comes from its tensors: the rule reads only these four.)"""
    import types

    assert gate.shape_problem(hidden, inter, experts, top_k) == why
    call = types.SimpleNamespace(hidden=hidden, inter=inter, num_experts=experts, top_k=top_k)
    rule = next(r for r in gate.RULES if r.name == "shape")
    assert rule.passes(call, fake_gpu) == (why == "")
    if why:
        assert rule.reason(call, fake_gpu) == f"shape D={hidden} I={inter} E={experts} K={top_k}: {why}"


def test_cap_and_cap_plus_one(fake_gpu, real_objects):
    layer, core, dispatch, qi = real_objects
    cap = gate.shape_cap(fake_gpu, "fp8_block128", SHAPE)
    assert cap >= 1
    for T, expect in ((cap, "kernel:smallm-compiled"), (cap + 1, "fallback:triton")):
        decision, _ = _decide(core, _with_tokens(dispatch, T), qi, core.config)
        assert decision.path == expect, (T, decision)
    assert "tokens:" in decision.reason and f"> cap {cap}" in decision.reason


def test_max_tokens_lowers_the_cap_through_sglangs_runner(fake_gpu, real_objects, monkeypatch):
    """SGLANG_SMALLM_MAX_TOKENS=N sends calls of more than N tokens to the fallback, naming itself and the
    measured cap it lowered; N at or above the cap changes nothing (it never raises one); 0 sends every call."""
    layer, core, dispatch, qi = real_objects
    cap = gate.shape_cap(fake_gpu, "fp8_block128", SHAPE)
    assert cap >= 3
    monkeypatch.setenv("SGLANG_SMALLM_MAX_TOKENS", "2")
    assert envs.problems() == []
    for T, expect in ((2, "kernel:smallm-compiled"), (3, "fallback:triton")):
        decision, _ = _decide(core, _with_tokens(dispatch, T), qi, core.config)
        assert decision.path == expect, (T, decision)
    assert f"tokens: 3 tokens > cap 2 (SGLANG_SMALLM_MAX_TOKENS=2, under the measured cap {cap}: " in decision.reason
    monkeypatch.setenv("SGLANG_SMALLM_MAX_TOKENS", "0")
    decision, _ = _decide(core, _with_tokens(dispatch, 1), qi, core.config)
    assert decision.path == "fallback:triton" and "> cap 0 (SGLANG_SMALLM_MAX_TOKENS=0" in decision.reason
    monkeypatch.setenv("SGLANG_SMALLM_MAX_TOKENS", str(cap + 100))
    assert gate.shape_cap(fake_gpu, "fp8_block128", SHAPE) == cap
    decision, _ = _decide(core, _with_tokens(dispatch, cap), qi, core.config)
    assert decision.path == "kernel:smallm-compiled" and "SGLANG_SMALLM_MAX_TOKENS" not in decision.reason


@pytest.mark.parametrize("value", ["-1", "twenty", "1.5"])
def test_max_tokens_refuses_what_it_does_not_take(monkeypatch, value):
    """A value that is not a whole number fails the startup check (the runner calls envs.check) with the
    fix, and never changes a cap."""
    monkeypatch.setenv("SGLANG_SMALLM_MAX_TOKENS", value)
    with pytest.raises(ValueError, match="SGLANG_SMALLM_MAX_TOKENS=.* is not a value it takes"):
        envs.check()
    assert gate.token_cap("sm_90", "fp8_block128", 256, 11, 4096)[0] == 30


def test_mi355x_default_caps():
    assert gate.token_cap("gfx950", "fp8_block128", 256, 11)[0] == 20
    assert gate.token_cap("gfx950", "fp8_block128", 128, 11)[0] == 48
    assert gate.token_cap("gfx950", "mxfp4", 256, 11)[0] == 40
    assert gate.token_cap("gfx942", "fp8_block128", 256, 11)[0] == 0
    # H200: split calls, faster than SGLang's layer to 33 at top-11 on two machines ("h200-s47" runs 1-4), to 30
    # on a third ("h200-s53" runs 3 and 5: 3-4 % slower at 31-33)
    cap, source = gate.token_cap("sm_90", "fp8_block128", 256, 11, 4096)
    assert cap == 30 and "top-11" in source and "at 31-33" in source and "three machines" in source
    assert gate.token_cap("sm_90", "fp8_block128", 256, 8, 4096)[0] == 30
    # more slots split sooner and were not measured past 20: the peer's 28 of before
    assert gate.token_cap("sm_90", "fp8_block128", 256, 16, 4096)[0] == 28
    cap, source = gate.token_cap("sm_90", "fp8_block128", 256, 11, 8192)
    assert cap == 20 and "measured at D=4096 only" in source
    assert gate.token_cap("sm_90", "fp8_block128", 256, 11)[0] == 20  # hidden size not given
    # split calls, faster than SGLang's layer to 63 at top-11 on two machines ("h200-s47" runs 5-6), to 59 on a
    # third ("h200-s53": 1.5-1.8 % slower at 60 and 63; 48 before, the peer's 40 before that); more slots keep 48
    assert gate.token_cap("sm_90", "fp8_block128", 128, 11, 4096)[0] == 59
    assert gate.token_cap("sm_90", "fp8_block128", 128, 12, 4096)[0] == 48
    # D <= 2048 against SGLang's layer ("h200-s43", "h200-s44" runs 2-3): the kernel is further from its floor there
    assert gate.token_cap("sm_90", "fp8_block128", 128, 10, 2048)[0] == 60  # top-10, "h200-s47" runs 5-6
    assert gate.token_cap("sm_90", "fp8_block128", 128, 11, 2048)[0] == 40  # more slots: not measured past 40
    cap, source = gate.token_cap("sm_90", "fp8_block128", 256, 10, 2048)
    assert cap == 25 and "D=2048" in source and "slower at 26" in source  # "h200-s46" runs 1-2
    assert gate.token_cap("sm_90", "fp8_block128", 512, 10, 2048)[0] == 1
    assert gate.token_cap("sm_90", "fp8_block128", 384, 10, 2048)[0] == 12  # its own row since "h200-s44" run 3
    assert gate.token_cap("sm_90", "fp8_block128", 128, 10, 1024)[0] == 60
    assert gate.token_cap("sm_90", "fp8_block128", 128, 11, 3072)[0] == 59  # D=4096's rows above 2048
    # the split was measured at D=4096 only: wider (or unknown) hidden sizes keep the cap measured before it
    cap, source = gate.token_cap("sm_90", "fp8_block128", 128, 11, 8192)
    assert cap == 20 and "measured at D=4096 only" in source
    assert gate.token_cap("sm_90", "fp8_block128", 128, 11)[0] == 20
    # I=384: faster than the peer at 1-13 tokens (the down's jobs split along I), measured at D=4096 only
    assert gate.token_cap("sm_90", "fp8_block128", 384, 8, 4096)[0] == 13
    assert gate.token_cap("sm_90", "fp8_block128", 384, 11, 4096)[0] == 13
    cap, source = gate.token_cap("sm_90", "fp8_block128", 512, 11, 4096)  # against SGLang's layer, "h200-s43" run 3
    assert cap == 6 and "I=512" in source
    assert gate.token_cap("sm_90", "fp8_block128", 640, 8, 4096)[0] == 0  # I > 512: not measured
    assert gate.token_cap("sm_90", "fp8_block128", 384, 5, 6144)[0] == 0  # MiniMax-M3-like: not measured
    assert gate.token_cap("sm_90", "fp8_block128", 384, 8)[0] == 0         # hidden size not given
    assert gate.token_cap("sm_90", "fp8_block128", 512, 8)[0] == 0


def test_decision_table_for_doctor():
    rows = gate.decision_table("gfx950", "fp8_block128", 4096, 256, 513, 11, [1, 20, 21])
    assert [ok for _, ok, _ in rows] == [True, True, False]
    assert "cap 20" in rows[2][2]
    # MXFP4 on gfx950 is AITER-shuffled, its e8m0 columns padded to 8 (I = 128: 4 -> 8): the table's scales must be
    # the shuffled layer's, or every count reads "scales" (it did, before 2026-12-04's fifty-first session)
    for layout in (None, "shuffle16x16", "row_major"):
        rows = gate.decision_table("gfx950", "mxfp4", 4096, 128, 513, 11, [1, 40, 41], layout)
        assert [ok for _, ok, _ in rows] == [True, True, False], (layout, rows)
        assert rows[2][2].startswith("tokens: 41 tokens > cap 40")


def test_no_gpu_never_uses_compiled_kernel(real_objects):
    layer, core, dispatch, qi = real_objects
    d, _ = _decide(core, dispatch, qi, core.config, only_compiled=False)
    assert d.path == "kernel:reference" and d.reason == "CPU tensors"


def test_selftest_tokens_include_the_device_cap():
    """`sglang-smallm selftest` checks 1, 3, 8 and the cap the gate uses on that device; below a cap
    of 8 (H200) also the kernel's own range up to 48 tokens."""
    from sglang_smallm_plugin import selftest
    from sglang_smallm_plugin.shapes import SHAPES

    tp4, tp8 = SHAPES["qwen35-tp4"], SHAPES["qwen35-tp8"]
    assert selftest.default_tokens(tp4, "fp8_block128", "sm_90") == [1, 3, 8, 30]
    assert selftest.default_tokens(tp8, "fp8_block128", "sm_90") == [1, 3, 8, 59]
    assert selftest.default_tokens(tp4, "fp8_block128", "gfx950") == [1, 3, 8, 20]
    assert selftest.default_tokens(tp8, "mxfp4", "gfx950") == [1, 3, 8, 40]
    assert selftest.default_tokens(SHAPES["minimax-m3"], "fp8_block128", "sm_90") == [1, 3, 8, 48]  # cap 0: unmeasured


def test_kernel_decision_log_names_the_kernels(fake_gpu, real_objects, caplog, monkeypatch):
    """The first decision per shape logs which kernels the launcher runs, and why (kernel_plan)."""
    import logging

    from sglang_smallm_plugin import runner

    layer, core, dispatch, qi = real_objects
    monkeypatch.setattr(runner, "_logged", set())  # a fresh once-per-key record: this call logs
    with caplog.at_level(logging.INFO):
        d, _ = _decide(core, _with_tokens(dispatch, 2), qi, core.config)
    assert d.path == "kernel:smallm-compiled", d.reason
    line = next(r.getMessage() for r in caplog.records if "-> kernel:smallm-compiled" in r.getMessage())
    if fake_gpu == "sm_90":
        assert "runs two-pass (variant 5): gate/up on tensor cores, down on tensor cores" in line, line
    else:
        assert "runs block kernel (variant 0)" in line, line


@pytest.mark.parametrize("layout", ["row_major", "shuffle16x16"])
def test_mxfp4_scales_alignment(layout):
    """Row-major MXFP4 scales are read four bytes at a time (the tensor-core down): a scale tensor
    starting one byte into its storage falls back with the reason; shuffled ones are read byte by byte
    and stay eligible."""
    import dataclasses

    from sglang_smallm_plugin.testdata import make_call, make_weights

    w = make_weights(SHAPE, "mxfp4", layout, 0, "cpu")
    call = make_call(SHAPE, "mxfp4", layout, 2, 0, "cpu", w)
    assert gate.evaluate(call, "sm_90")[0]
    s = call.w2_scale
    store = torch.zeros(s.numel() + 1, dtype=s.dtype)
    store[1:] = s.reshape(-1)
    shifted = store[1:].view(s.shape)
    assert shifted.is_contiguous() and shifted.data_ptr() % 4 and torch.equal(shifted, s)
    ok, why = gate.evaluate(dataclasses.replace(call, w2_scale=shifted), "sm_90")
    if layout == "row_major":
        assert not ok and why.startswith("alignment:") and "w2_scale (4 bytes)" in why, why
    else:
        assert ok, why


@pytest.mark.parametrize("fmt", ["fp8_block128", "mxfp4"])
def test_padded_layer_is_gated_at_its_computed_size(fake_gpu, fmt):
    """A layer SGLang padded for AITER (layer.intermediate_pad): the shape and cap rules read the computed I, the
    weight and scale rules the stored one; padding the kernel cannot skip has its own rule and reason."""
    import dataclasses

    from sglang_smallm_plugin.testdata import make_call, make_padded_weights

    plain = make_call(SHAPE, fmt, "row_major", 3, 0, "cpu")
    w = make_padded_weights(SHAPE, fmt, "row_major", 0, "cpu", pad=128)
    call = dataclasses.replace(plain, **w, inter_pad=128)
    assert (call.inter, call.inter_stored) == (128, 256)
    assert gate.call_cap(call, fake_gpu) == gate.call_cap(plain, fake_gpu)  # I = 128's cap, not 256's
    ok, why = gate.evaluate(call, fake_gpu)
    assert ok, why
    ok, why = gate.evaluate(dataclasses.replace(call, inter_pad=256), fake_gpu)  # nothing left to compute
    assert not ok and why.startswith("inter_pad:"), why
    odd = dataclasses.replace(call, **make_padded_weights(SHAPE, fmt, "row_major", 0, "cpu", pad=64), inter_pad=64)
    ok, why = gate.evaluate(odd, fake_gpu)  # stored 192: not a multiple of 128
    assert not ok and why.startswith("inter_pad:"), why
    ok, why = gate.evaluate(dataclasses.replace(call, inter_pad=0), fake_gpu)  # read whole: 256, also a valid layer
    assert ok, why


def test_hidden_padding_is_not_taken(sglang_smallm):
    """SGLang's hidden_pad (AITER) changes what x's rows mean to the weights: such a layer's calls are described
    as an unsupported format, so the gate gives them to the fallback with the reason."""
    import types

    from sglang_smallm_plugin.sglang_integration.runner_core import describe_call
    from sglang_smallm_plugin.testdata import make_call

    from sglang.srt.layers.moe.topk import StandardTopKOutput

    c = make_call(SHAPE, "fp8_block128", "row_major", 2, 0, "cpu")
    topk = StandardTopKOutput(c.topk_weights, c.topk_ids, torch.empty(0))
    dispatch = types.SimpleNamespace(topk_output=topk, hidden_states=c.x)
    qi = types.SimpleNamespace(w13_weight=c.w13, w2_weight=c.w2, w13_scale=c.w13_scale, w2_scale=c.w2_scale,
                               block_shape=[128, 128])
    config = types.SimpleNamespace(activation="silu", is_gated=True, apply_router_weight_on_input=False,
                                   no_combine=False, routed_scaling_factor=None, gemm1_alpha=None,
                                   gemm1_clamp_limit=None, swiglu_limit=None, layer_id=3)
    call = describe_call(dispatch, qi, config, "fp8_block128", hidden_pad=128)
    ok, why = gate.evaluate(call, "gfx950")
    assert not ok and "hidden size padded by 128" in why, why
    assert describe_call(dispatch, qi, config, "fp8_block128").weight_format == "fp8_block128"


@pytest.mark.parametrize("measured", [2, 70])
def test_measured_cap_decides_through_sglangs_runner(fake_gpu, real_objects, monkeypatch, tmp_path, measured, caplog):
    """A cap from SGLANG_SMALLM_CAPS_FILE (measured_caps.py) for the layer's exact shape replaces the built-in one,
    lowered (2) or raised (70), and each decision names the file; an entry for another E leaves the built-in cap."""
    import json

    from sglang_smallm_plugin import measured_caps

    layer, core, dispatch, qi = real_objects
    builtin = gate.shape_cap(fake_gpu, "fp8_block128", SHAPE, "row_major")
    entry = dict(weight_format="fp8_block128", layout="row_major", hidden=SHAPE.hidden, inter=SHAPE.inter,
                 experts=SHAPE.experts, top_k=SHAPE.slots, cap=measured, against="SGLang's fallback, kernels off")
    doc = dict(kind=measured_caps.KIND, version=measured_caps.VERSION, device="fake", arch=fake_gpu, date="2026-12-04",
               entries=[entry])
    path = tmp_path / "caps.json"
    path.write_text(json.dumps(doc))
    measured_caps.forget()
    monkeypatch.setenv("SGLANG_SMALLM_CAPS_FILE", str(path))
    try:
        assert envs.problems() == [] and measured != builtin
        for T, expect in ((measured, "kernel:smallm-compiled"), (measured + 1, "fallback:triton")):
            decision, _ = _decide(core, _with_tokens(dispatch, T), qi, core.config)
            assert decision.path == expect, (T, decision)
            assert "measured on this machine (fake, 2026-12-04)" in decision.reason
        assert f"tokens: {measured + 1} tokens > cap {measured} (measured on this machine" in decision.reason
        assert "has no entry" not in caplog.text
        path.write_text(json.dumps(dict(doc, entries=[dict(entry, experts=SHAPE.experts + 1)])))
        measured_caps.forget()
        from sglang_smallm_plugin import runner as runner_mod

        runner_mod._logged.clear()
        with caplog.at_level("WARNING", logger="sglang_smallm"):
            decision, _ = _decide(core, _with_tokens(dispatch, builtin + 1), qi, core.config)
        assert decision.path == "fallback:triton" and f"> cap {builtin} (" in decision.reason
        assert "measured on this machine" not in decision.reason
        # the log says once that the file has nothing for this layer, what it has, and how to measure it
        assert (f"SGLANG_SMALLM_CAPS_FILE={path} has no entry for fp8_block128 row_major D={SHAPE.hidden} "
                f"I={SHAPE.inter} E={SHAPE.experts} K={SHAPE.slots} on {fake_gpu}, so this layer keeps the built-in "
                "caps") in caplog.text
        assert f"E={SHAPE.experts + 1} K={SHAPE.slots}: cap {measured}" in caplog.text
        assert f"--shapes D{SHAPE.hidden}-E{SHAPE.experts}-K{SHAPE.slots}-I{SHAPE.inter}" in caplog.text
    finally:
        measured_caps.forget()
