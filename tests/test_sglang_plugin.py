"""Integration with a real SGLang 0.5.23 install: discovery, CLI, spawned processes, and SGLang's
own FusedMoE layer (FP8 block-scale and Quark MXFP4) running through the smallm runner on CPU."""

import importlib.metadata
import multiprocessing as mp
import os
import subprocess
import sys

import pytest
import torch

from moe_loop import loop_moe
from sglang_smallm_plugin.tolerances import TOLERANCES, rel_l2

PY = sys.executable


def _run(code: str, env=None, timeout=300):
    e = dict(os.environ)
    e.pop("SGLANG_USE_CPU_ENGINE", None)
    e.update(env or {})
    return subprocess.run([PY, "-c", code], capture_output=True, text=True, env=e, timeout=timeout)


def test_entry_point_visible():
    eps = [ep for ep in importlib.metadata.entry_points(group="sglang.srt.plugins") if ep.name == "smallm"]
    assert len(eps) == 1 and eps[0].value == "sglang_smallm_plugin:register"


LOAD_AND_REPORT = """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import add_moe_runner_backend_choices
from sglang.srt.layers.moe.moe_runner import runner
print('CHOICE', 'smallm' in add_moe_runner_backend_choices.__self__)
print('CORE', 'smallm' in runner._CUSTOM_RUNNER_CORE_FACTORIES)
"""


def test_sglang_load_plugins_discovers_us():
    r = _run(LOAD_AND_REPORT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "CHOICE True" in r.stdout and "CORE True" in r.stdout


def test_sglang_plugins_whitelist_excludes_us():
    r = _run(LOAD_AND_REPORT, env={"SGLANG_PLUGINS": "some-other-plugin"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "CHOICE False" in r.stdout and "CORE False" in r.stdout


def test_register_twice_is_harmless():
    r = _run(LOAD_AND_REPORT + """
import sglang_smallm_plugin
sglang_smallm_plugin.register(); sglang_smallm_plugin.register()
print('COUNT', add_moe_runner_backend_choices.__self__.count('smallm'))
""")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "COUNT 1" in r.stdout


def test_too_old_sglang_changes_nothing():
    r = _run("""
import logging, importlib.metadata as md
logging.basicConfig(level=logging.INFO)
real = md.version
md.version = lambda name: '0.5.18' if name == 'sglang' else real(name)
import sglang_smallm_plugin
sglang_smallm_plugin.register()
from sglang.srt.server_args import add_moe_runner_backend_choices
print('CHOICE', 'smallm' in add_moe_runner_backend_choices.__self__)
""")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "CHOICE False" in r.stdout
    assert "SGLang 0.5.18 found, but sglang-smallm needs SGLang >= 0.5.19" in r.stderr


def test_sglang_without_distribution_metadata_is_found():
    """SGLang importable but not pip-installed (a source checkout or unpacked wheel on PYTHONPATH, as on
    the H200 image): its version comes from sglang.version, and the backend registers."""
    r = _run("""
import logging, importlib.metadata as md
logging.basicConfig(level=logging.INFO)
real = md.version
def version(name):
    if name == 'sglang':
        raise md.PackageNotFoundError(name)
    return real(name)
md.version = version
import sglang_smallm_plugin
from sglang_smallm_plugin.sglang_integration.compat import probe
print('PROBE', probe())
sglang_smallm_plugin.register()
from sglang.srt.server_args import add_moe_runner_backend_choices
print('CHOICE', 'smallm' in add_moe_runner_backend_choices.__self__)
""")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "PROBE (True, 'SGLang 0.5.23 (plugin APIs present" in r.stdout
    assert "CHOICE True" in r.stdout


def test_launch_server_help_lists_smallm():
    r = subprocess.run([PY, "-m", "sglang.launch_server", "--help"], capture_output=True, text=True, timeout=600,
                       env={k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"})
    assert r.returncode == 0, r.stderr[-3000:]
    text = " ".join(r.stdout.split())
    assert "--moe-runner-backend" in text and "smallm" in text[text.index("--moe-runner-backend"):]


def _spawned_child(q):
    # What a scheduler process does: load plugins first, then parse and resolve.
    from sglang.srt.plugins import load_plugins

    load_plugins()
    import argparse

    from sglang.srt.layers.moe.utils import resolve_moe_runner_backend
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(["--model-path", "dummy", "--moe-runner-backend", "smallm"])
    b = resolve_moe_runner_backend(ns.moe_runner_backend)
    q.put((type(b).__name__, b.value))


def test_cli_parsing_resolves_in_spawned_process():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_spawned_child, args=(q,))
    p.start()
    p.join(300)
    assert p.exitcode == 0
    assert q.get(timeout=5) == ("RegisteredMoeRunnerBackend", "smallm")


def test_unknown_backend_still_rejected_by_parser():
    r = _run("""
from sglang.srt.plugins import load_plugins
load_plugins()
import argparse
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)
try:
    p.parse_args(['--model-path', 'x', '--moe-runner-backend', 'smallmx'])
except SystemExit as e:
    print('REJECTED', e.code)
""")
    assert "REJECTED 2" in r.stdout


# ----------------------------------------------------------------- SGLang's FusedMoE on CPU
from sglang_smallm_plugin.shapes import MoeShape  # noqa: E402

SMALL = MoeShape("small", 256, 9, 4, 128, 1)
QWEN_CPU = MoeShape("qwen35-cpu", 4096, 17, 11, 256, 1, "Qwen3.5 TP4 layer with experts reduced for CPU")


def _loop_reference(call):
    """Independent of the provider code (tests/moe_loop.py), rounded to bf16 like the layer."""
    return loop_moe(call).to(torch.bfloat16)


@pytest.mark.parametrize("fmt", ["fp8_block128", "mxfp4"])
@pytest.mark.parametrize("seed", range(3))
def test_fused_moe_layer_runs_through_smallm(sglang_smallm, fmt, seed, caplog):
    from sglang_smallm_plugin.testdata import make_call, make_weights

    w = make_weights(SMALL, fmt, "row_major", seed, "cpu")
    layer = sglang_smallm.build_layer(SMALL, fmt, w, layer_id=seed)
    method = sglang_smallm.moe_method(layer)
    core = method.runner.runner_core
    assert type(core).__name__ == "SmallmRunnerCore" and method.runner.runner_backend.value == "smallm"
    for T in (0, 1, 3, 8):
        call = make_call(SMALL, fmt, "row_major", T, seed + 10 * T, "cpu", w)
        with caplog.at_level("INFO", logger="sglang_smallm"):
            out = sglang_smallm.forward(layer, call.x, call.topk_weights, call.topk_ids)
        assert out.shape == (T, SMALL.hidden) and out.dtype == torch.bfloat16
        if T:
            assert rel_l2(out.float(), _loop_reference(call).float()) < TOLERANCES["sglang_layer_vs_loop"]
    assert "kernel:reference" in caplog.text


def test_harness_forward_keeps_callers_x(sglang_smallm):
    """SGLang's FusedMoE runs in place by default (its Triton runner writes the output into x): the
    harness gives each call its own copy, so comparing two layers on one call compares like with like."""
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(5))
    kept = x.clone()

    def in_place_layer(h, topk):
        return h.mul_(2.0)

    out = sglang_smallm.forward(in_place_layer, x, torch.ones(3, 1), torch.zeros(3, 1, dtype=torch.int32))
    assert torch.equal(x, kept) and torch.equal(out, 2.0 * kept)


def test_qwen35_shaped_fp8_layer(sglang_smallm):
    from sglang_smallm_plugin.testdata import make_call, make_weights

    w = make_weights(QWEN_CPU, "fp8_block128", "row_major", 0, "cpu")
    layer = sglang_smallm.build_layer(QWEN_CPU, "fp8_block128", w, layer_id=40)
    call = make_call(QWEN_CPU, "fp8_block128", "row_major", 2, 3, "cpu", w)
    out = sglang_smallm.forward(layer, call.x, call.topk_weights, call.topk_ids)
    assert rel_l2(out.float(), _loop_reference(call).float()) < TOLERANCES["sglang_layer_vs_loop"]


@pytest.mark.parametrize("fmt", ["fp8_block128", "mxfp4"])
def test_layer_through_smallm_under_torch_compile(sglang_smallm, fmt):
    """SGLang's --enable-torch-compile compiles the model's forward, MoE layers included: dynamo must get through
    the smallm runner (the plugin's runner core, gate and provider; it may break the graph there, as at the
    runner swap in `presenting`) and the compiled layer must give the eager layer's output, at every token count
    (one compiled function, so later counts re-trace or reuse it)."""
    import torch._dynamo

    from sglang.srt.layers.moe.topk import StandardTopKOutput

    from sglang_smallm_plugin.testdata import make_call, make_weights

    w = make_weights(SMALL, fmt, "row_major", 7, "cpu")
    layer = sglang_smallm.build_layer(SMALL, fmt, w, layer_id=95)

    def f(x, tw, ti):
        return layer(x.clone(), StandardTopKOutput(tw, ti, torch.empty(0)))

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="eager")
    for T in (1, 3, 8):
        call = make_call(SMALL, fmt, "row_major", T, 70 + T, "cpu", w)
        eager = f(call.x, call.topk_weights, call.topk_ids)
        out = compiled(call.x, call.topk_weights, call.topk_ids)
        assert torch.equal(out, eager), (fmt, T)
        assert rel_l2(out.float(), _loop_reference(call).float()) < TOLERANCES["sglang_layer_vs_loop"]
    torch._dynamo.reset()


def test_kernels_off_takes_fallback_and_says_why(sglang_smallm, monkeypatch, caplog):
    """SGLANG_ROCM_SMALLM_MOE=0: every call goes to the fallback (Triton here), which cannot run on
    CPU: the error must say so instead of producing anything."""
    from sglang_smallm_plugin.testdata import make_call, make_weights

    w = make_weights(SMALL, "fp8_block128", "row_major", 0, "cpu")
    layer = sglang_smallm.build_layer(SMALL, "fp8_block128", w, layer_id=90)
    call = make_call(SMALL, "fp8_block128", "row_major", 2, 0, "cpu", w)
    monkeypatch.setenv("SGLANG_ROCM_SMALLM_MOE", "0")
    decision = layer.quant_method.runner.runner_core.selector.decide(call)
    assert decision.path == "fallback:triton" and "SGLANG_ROCM_SMALLM_MOE=0" in decision.reason
    with pytest.raises(RuntimeError, match="fallback runner 'triton' cannot run on CPU"):
        sglang_smallm.forward(layer, call.x, call.topk_weights, call.topk_ids)


def test_fallback_runner_is_sglangs_triton_runner(sglang_smallm):
    from sglang_smallm_plugin.testdata import make_weights

    w = make_weights(SMALL, "fp8_block128", "row_major", 1, "cpu")
    layer = sglang_smallm.build_layer(SMALL, "fp8_block128", w, layer_id=91)
    core = layer.quant_method.runner.runner_core
    assert core.fallback_backend.value == "triton"
    assert core.fallback_runner.runner_backend.value == "triton" and core.fallback_runner.fused_func is not None
    # weights keep the layout the Triton fallback needs: untouched row-major
    assert torch.equal(layer.w13_weight.data.view(torch.uint8), w["w13"].view(torch.uint8))


def test_no_provider_can_serve_fails_at_startup(sglang_smallm, monkeypatch):
    from sglang_smallm_plugin import runner as runner_mod
    from sglang_smallm_plugin.testdata import make_weights

    monkeypatch.setattr(runner_mod.MoeSelector, "availability",
                        lambda self, device: [("smallm-compiled", False, "no GPU"), ("reference", False, "GPU tensors")])
    w = make_weights(SMALL, "fp8_block128", "row_major", 0, "cpu")
    with pytest.raises(RuntimeError, match="no small-M kernel can run here.*Fix:.*SGLANG_ROCM_SMALLM_MOE=0"):
        sglang_smallm.build_layer(SMALL, "fp8_block128", w, layer_id=92)
    monkeypatch.setenv("SGLANG_ROCM_SMALLM_MOE", "0")  # the documented escape hatch builds fine
    sglang_smallm.build_layer(SMALL, "fp8_block128", w, layer_id=93)


def test_quark_mxfp4_without_aiter_is_refused_at_startup_on_a_gpu(sglang_smallm, monkeypatch):
    """On a GPU without AITER (CUDA), SGLang's Quark MXFP4 scheme has no runner for calls above the cap:
    smallm must refuse the layer when it is built, saying why and what to do, rather than serve the small
    calls and fail on the first large one (README: on CUDA it refuses such checkpoints at startup)."""
    from sglang_smallm_plugin import runner as runner_mod
    from sglang_smallm_plugin.testdata import make_weights

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the startup check's view of the machine
    monkeypatch.setattr(runner_mod.MoeSelector, "availability",
                        lambda self, device: [("smallm-compiled", True, "sm_90a")])
    w = make_weights(SMALL, "mxfp4", "row_major", 0, "cpu")
    with pytest.raises(RuntimeError, match="runs only on the AITER runner.*Calls above the small-M cap would have "
                                           "no runner.*Fix: run this checkpoint on ROCm with AITER"):
        sglang_smallm.build_layer(SMALL, "mxfp4", w, layer_id=94)


def test_hooks_really_applied(sglang_smallm):
    from sglang_smallm_plugin.sglang_integration.entry import hooks_status

    status = hooks_status()
    assert status and all(applied is True for _, applied in status), status
