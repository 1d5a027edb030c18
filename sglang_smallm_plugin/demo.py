"""`sglang-smallm demo`, the main job: a Qwen3.5-397B-A17B-shaped MoE layer (TP4: D=4096, I=256,
10 routed + 1 fused shared expert) built by SGLang itself (FusedMoE + Fp8MoEMethod or Quark MXFP4)
with --moe-runner-backend smallm, run at 1..48 tokens. Per token count: the path the plugin took,
the time, and the relative error against the pure-torch reference. On CPU the experts are reduced
(33 by default); the calls gfx950's gate admits run the gfx950 build of the kernels emulated on the CPU
(`--emulate`, the default there where a host clang++ can build it: providers/emulated.py) and the rest the
reference provider (with `--no-emulate` the reference serves every call); on a GPU the real kernels and
the real fallback run, with all 513 experts."""

import logging
import time

import torch

from .shapes import MoeShape
from .testdata import make_call, make_weights, reference_of
from .tolerances import moe_tolerance, rel_l2


def main(a) -> int:
    logging.basicConfig(level=logging.WARNING)
    from .sglang_integration import layer_harness

    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    experts = a.experts or (513 if gpu else 33)
    shape = MoeShape("qwen35-tp4-demo", 4096, experts, 11, 256, 1)
    tokens = list(a.tokens)
    layer_harness.setup("smallm")
    print(f"demo: Qwen3.5-397B-A17B MoE layer at TP4 (D=4096, I=256, E={experts}, top-10 + shared, {a.format}) "
          f"on {device}; SGLang FusedMoE with --moe-runner-backend smallm")
    if not gpu:
        _choose_emulation(a.emulate)
    t0 = time.time()
    w = make_weights(shape, a.format, "row_major", 0, device)
    layer = layer_harness.build_layer(shape, a.format, w, device=device)
    method = layer_harness.moe_method(layer)
    core = method.runner.runner_core
    print(f"layer built in {time.time() - t0:.1f}s; runner={method.runner.runner_backend.value}, "
          f"fallback={core.fallback_backend.value if core.fallback_backend else 'none'}")
    tol = moe_tolerance(a.format)
    print(f"{'tokens':>6} {'path':28} {'time':>10} {'rel err':>9}  reason")
    worst = 0.0
    for T in tokens:
        call = make_call(shape, a.format, "row_major", T, 100 + T, device, w)
        d = layer_harness.decide(layer, call)
        out = layer_harness.forward(layer, call.x, call.topk_weights, call.topk_ids)  # warm-up
        if gpu:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        reps = 20 if gpu else 1
        for _ in range(reps):
            out = layer_harness.forward(layer, call.x, call.topk_weights, call.topk_ids)
        if gpu:
            torch.cuda.synchronize()
        us = (time.perf_counter() - t1) / reps * 1e6
        err = rel_l2(out.float(), reference_of(call, acc_dtype=torch.float64).float())  # fp64 reference
        worst = max(worst, err)
        print(f"{T:6d} {d.path:28} {us:8.0f}us {err:9.2e}  {d.reason}")
    print(f"worst relative error {worst:.2e} (tolerance {tol:.0e}): {'OK' if worst <= tol else 'FAIL'}")
    return 0 if worst <= tol else 1


def _choose_emulation(wanted) -> None:
    """On CPU: the gfx950 build emulated as a provider (wanted None: where it can be built; True: or fail with
    the reason), else the reference serves every call. Says which."""
    import os

    from . import emulated, hookspecs

    why = emulated.unavailable_reason()
    if wanted is False or (wanted is None and why):
        print("kernel path on CPU: the pure-torch reference provider"
              + (f" (the gfx950 emulation cannot be built here: {why})" if why and wanted is None else ""))
        return
    if why:
        raise SystemExit(f"demo --emulate: the gfx950 emulation cannot be built here: {why}")
    os.environ["SGLANG_SMALLM_EMULATE"] = "1"
    hookspecs.reload_providers()  # its next use registers the emulated providers
    emulated.load()
    print(f"kernel path on CPU: {emulated.describe()}, for the calls gfx950's gate admits; the reference provider "
          "for the rest (`--no-emulate`: the reference for every call)")
