"""A Triton MoE configuration of the user's own for the fallback (SGLANG_MOE_CONFIG_DIR) is found by the
layer's shape and named at startup, once per shape, with the fix (SGLANG_SMALLM_MAX_TOKENS); the caps
themselves do not change."""

import logging
import os

import pytest

from sglang_smallm_plugin import gate, runner
from sglang_smallm_plugin.shapes import MoeShape
from sglang_smallm_plugin.sglang_integration import triton_configs

NAME = "E={},N={},device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"


def _tree(root, files):
    for rel in files:
        path = os.path.join(root, "configs", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("{}")


def test_found_by_shape_in_any_triton_folder(tmp_path):
    _tree(tmp_path, [f"triton_3_6_0/{NAME.format(513, 256)}", f"triton_3_2_0/{NAME.format(513, 256)}",
                     f"triton_3_6_0/{NAME.format(513, 128)}",                       # another N
                     "triton_3_6_0/E=513,N=256,device_name=NVIDIA_H200.json",          # not FP8 block-scale
                     f"other/{NAME.format(513, 256)}"])                                # not a triton_ folder
    env = {"SGLANG_MOE_CONFIG_DIR": str(tmp_path)}
    found = triton_configs.user_fp8_configs(513, 256, env)
    assert [os.path.relpath(f, tmp_path) for f in found] == [
        f"configs/triton_3_2_0/{NAME.format(513, 256)}", f"configs/triton_3_6_0/{NAME.format(513, 256)}"]
    assert triton_configs.user_fp8_configs(513, 384, env) == []
    assert triton_configs.user_fp8_configs(513, 256, {}) == []                        # unset: SGLang's own
    assert triton_configs.user_fp8_configs(513, 256, {"SGLANG_MOE_CONFIG_DIR": str(tmp_path / "none")}) == []


def test_note_names_the_file_and_the_fix_unless_max_tokens_is_set(tmp_path):
    _tree(tmp_path, [f"triton_3_6_0/{NAME.format(513, 256)}"])
    env = {"SGLANG_MOE_CONFIG_DIR": str(tmp_path)}
    found = triton_configs.user_fp8_configs(513, 256, env)
    note = triton_configs.tuned_fallback_note(513, 256, found, False)
    assert NAME.format(513, 256) in note and "Fix: set SGLANG_SMALLM_MAX_TOKENS" in note
    assert triton_configs.tuned_fallback_note(513, 256, found, True) == ""
    assert triton_configs.tuned_fallback_note(513, 128, triton_configs.user_fp8_configs(513, 128, env), False) == ""


@pytest.mark.parametrize("max_tokens", ["", "6"])
def test_startup_warns_once_per_shape(sglang_smallm, tmp_path, monkeypatch, caplog, max_tokens):
    """Two layers of one shape built through SGLang's FusedMoE with --moe-runner-backend smallm (Triton
    fallback): one warning naming the user's file, none where SGLANG_SMALLM_MAX_TOKENS is set; the cap the
    gate uses is the measured one unless that switch lowers it."""
    from sglang_smallm_plugin.testdata import make_weights

    shape = MoeShape("tuned-fallback-test", 256, 7, 2, 128, 0)
    w = make_weights(shape, "fp8_block128", "row_major", 0, "cpu")
    monkeypatch.setattr(runner, "_logged", set())
    measured = gate.shape_cap("sm_90", "fp8_block128", shape)
    assert measured > 6
    if max_tokens:
        monkeypatch.setenv("SGLANG_SMALLM_MAX_TOKENS", max_tokens)
    caplog.set_level(logging.WARNING, logger="sglang_smallm")
    layers = []
    for layer_id in (301, 302):
        if not layers:  # the file is for the shape SGLang sees (its local experts, N = I per partition)
            probe = sglang_smallm.build_layer(shape, "fp8_block128", w, layer_id=300)
            _tree(tmp_path, [f"triton_3_6_0/{NAME.format(probe.num_local_experts, probe.intermediate_size_per_partition)}"])
            monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", str(tmp_path))
            monkeypatch.setattr(runner, "_logged", set())
            caplog.clear()
        layers.append(sglang_smallm.build_layer(shape, "fp8_block128", w, layer_id=layer_id))
    notes = [r.getMessage() for r in caplog.records if "SGLANG_MOE_CONFIG_DIR" in r.getMessage()]
    assert len(notes) == (0 if max_tokens else 1), notes
    if notes:
        assert str(tmp_path) in notes[0] and "SGLANG_SMALLM_MAX_TOKENS" in notes[0]
    assert gate.shape_cap("sm_90", "fp8_block128", shape) == (6 if max_tokens else measured)
