"""SGLang 0.5.23's own gfx950 small-M kernel beside the plugin (sglang_integration/upstream_smallm.py): what
`doctor` says about it on each kind of machine, and that the plugin's MI355X caps are SGLang's own for the
shapes both cover (so at the default caps no call the plugin hands to the AITER fallback is one SGLang's
kernel would take)."""

import importlib

import pytest
import torch

from sglang_smallm_plugin import gate
from sglang_smallm_plugin.sglang_integration import upstream_smallm


@pytest.fixture
def upstream():
    return importlib.import_module(upstream_smallm.MODULE)


def test_on_a_machine_without_rocm_it_is_named_and_not_used(upstream):
    s = upstream_smallm.status()
    assert s.startswith("in this SGLang (FP8 up to {256: 20, 128: 48} tokens, MXFP4 up to {256: 40}")
    assert s.endswith("gfx950 with ROCm >= 7.2 only, so not on this machine")


@pytest.mark.parametrize("enabled, says", [(True, "enabled ("), (False, "in this SGLang (FP8")])
def test_on_rocm_it_says_whether_sglang_enabled_it(upstream, monkeypatch, enabled, says):
    monkeypatch.setattr(torch.version, "hip", "7.2.0", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(upstream, "smallm_moe_enabled", lambda: enabled)
    s = upstream_smallm.status()
    assert s.startswith(says), s
    assert ("SGLANG_ROCM_SMALLM_MOE=0 turns it off too" in s) == enabled and ("not enabled here" in s) != enabled
    assert ("--write-caps FILE` times both" in s) == enabled  # which is faster there is for the user to measure


def test_an_sglang_without_it(monkeypatch):
    monkeypatch.setattr(upstream_smallm, "MODULE", "sglang.kernels.ops.moe.no_such_kernel")
    assert upstream_smallm.status().startswith("none in this SGLang (ModuleNotFoundError")


def test_plugin_mi355x_caps_are_sglangs_own_where_both_apply(upstream):
    """Qwen3.5-397B (hidden 4096, 11 slots with the shared expert): FP8 at I = 256 and 128, MXFP4 at 256."""
    for fmt, caps in (("fp8_block128", upstream.MAX_TOK_DISPATCH_FP8), ("mxfp4", upstream.MAX_TOK_DISPATCH)):
        for inter, theirs in caps.items():
            ours, source = gate.token_cap("gfx950", fmt, inter, 11, upstream.DIM)
            assert ours == min(theirs, upstream.MAX_TOK), (fmt, inter, ours, theirs, source)
