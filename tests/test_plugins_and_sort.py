"""pluggy: built-in providers, third-party providers by priority, tracing; the sort wrapper slot."""

import logging

import pytest
import torch

from sglang_smallm_plugin import hookspecs, runner
from sglang_smallm_plugin.calls import SortCall
from sglang_smallm_plugin.shapes import MoeShape
from sglang_smallm_plugin.sort_wrapper import SortSelector, wrap_sort
from sglang_smallm_plugin.testdata import make_call


@pytest.fixture
def fresh_pm():
    hookspecs.reset_for_tests()
    yield hookspecs.get_plugin_manager()
    hookspecs.reset_for_tests()


def test_builtin_providers_in_priority_order(fresh_pm):
    assert [p.name for p in hookspecs.moe_providers()] == ["smallm-compiled", "reference"]
    assert [p.name for p in hookspecs.sort_providers()] == ["smallm-sort", "reference-sort"]


class _Always:
    name, priority = "third-party", 1000

    def available(self, device):
        return True, "test"

    def supports(self, call):
        return True, "test provider takes everything"

    def run(self, call):
        return torch.zeros_like(call.x)


def test_third_party_provider_wins_by_priority(fresh_pm):
    class Plugin:
        @hookspecs.hookimpl
        def register_moe_kernels(self, register):
            register(_Always())

    fresh_pm.register(Plugin(), name="third")
    sel = runner.MoeSelector("triton")
    call = make_call(MoeShape("t", 256, 5, 2, 128, 0), "fp8_block128", "row_major", 2, 0, "cpu")
    d = sel.decide(call)
    assert d.path == "kernel:third-party" and torch.equal(d.provider.run(call), torch.zeros_like(call.x))


def test_trace_logs_hook_calls(monkeypatch, caplog):
    monkeypatch.setenv("SGLANG_SMALLM_TRACE", "1")
    hookspecs.reset_for_tests()
    try:
        with caplog.at_level(logging.INFO, logger="sglang_smallm"):
            hookspecs.moe_providers()
        assert "smallm hook register_moe_kernels -> ['builtin']" in caplog.text
    finally:
        hookspecs.reset_for_tests()


def test_decisions_are_cached_and_logged_once(caplog):
    sel = runner.MoeSelector("triton")
    call = make_call(MoeShape("t", 256, 5, 2, 128, 0), "fp8_block128", "row_major", 2, 0, "cpu")
    call.layer_id = 4242
    with caplog.at_level(logging.INFO, logger="sglang_smallm"):
        a, b = sel.decide(call), sel.decide(call)
    assert a is b
    assert caplog.text.count("layer 4242") == 1


# ----------------------------------------------------------------- sort wrapper
def _sort_call():
    ids = torch.randint(0, 9, (3, 2), dtype=torch.int32)
    return ids, SortCall(topk_ids=ids, topk_weights=None, num_experts=9, block_size=4, output_format="triton")


def test_sort_wrapper_uses_provider_when_gate_says_yes():
    from sglang_smallm_plugin import reference

    ids, call = _sort_call()
    seen = []
    wrapped = wrap_sort(lambda *a, **k: seen.append("original") or "orig", lambda *a, **k: (call, ""), lambda: True)
    out = wrapped(ids, 4, 9)
    assert seen == [] and torch.equal(out[0], reference.moe_align_block_size(ids, 9, 4)[0])


@pytest.mark.parametrize("why", ["inactive", "kernels_off", "declined", "undescribable"])
def test_sort_wrapper_falls_through_to_original(monkeypatch, why):
    ids, call = _sort_call()
    active = why != "inactive"
    if why == "kernels_off":
        monkeypatch.setenv("SGLANG_ROCM_SMALLM_MOE", "0")
    if why == "declined":
        call.has_expert_mask = True
    describe = (lambda *a, **k: (None, "options")) if why == "undescribable" else (lambda *a, **k: (call, ""))
    wrapped = wrap_sort(lambda *a, **k: "original", describe, lambda: active, SortSelector())
    assert wrapped(ids, 4, 9) == "original"


def test_sglang_triton_sort_is_wrapped(sglang_smallm):
    import importlib
    import inspect

    fm = importlib.import_module("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe")
    mab = importlib.import_module("sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size")

    assert inspect.unwrap(mab.moe_align_block_size) is not mab.moe_align_block_size
    assert fm.moe_align_block_size is mab.moe_align_block_size  # the copy the Triton runner calls
    ids = torch.randint(0, 9, (3, 2), dtype=torch.int32)
    out = fm.moe_align_block_size(ids, 4, 9)  # smallm selected, CPU tensors -> reference sort
    from sglang_smallm_plugin import reference

    assert torch.equal(out[0], reference.moe_align_block_size(ids, 9, 4)[0])
