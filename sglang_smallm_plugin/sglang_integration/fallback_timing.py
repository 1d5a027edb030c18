"""The fallback's time for `sglang-smallm bench`: SGLang's own FusedMoE layer, built with
`--moe-runner-backend smallm` by layer_harness, run with SGLANG_ROCM_SMALLM_MOE=0, so every call takes the
runner SGLang would use without the plugin (AITER on ROCm, Triton on CUDA); on ROCm that switch also turns off
SGLang's own small-M kernel (upstream_smallm.py), so where that kernel is enabled the bench also times SGLang as
shipped: the plugin's gate handing every call over (SGLANG_SMALLM_MAX_TOKENS=0), SGLang's switch left on. One
layer per weight copy, the calls rotated among them in one CUDA graph as the kernel's are, so neither path finds
its weights in L2.

Where the fallback cannot run on this machine (no SGLang, a scheme SGLang does not run here, a runner
that cannot be captured or called), the bench gets the reason instead of a time; it never fails for it.
"""

import contextlib
import os
import time

import torch

from .. import envs
from ..timing import graph_us


@contextlib.contextmanager
def switched(name: str, value: str):
    """Environment variable `name` = `value` for the duration (the runner reads it per call), then as it was."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def kernels_off():
    """SGLANG_ROCM_SMALLM_MOE=0: the plugin's kernels off, and on ROCm SGLang's own small-M kernel too."""
    return switched(envs.KERNELS.name, "0")


def plugin_hands_over():
    """SGLANG_SMALLM_MAX_TOKENS=0: the plugin's gate hands every call to the fallback, whose own choices stay on
    (on ROCm SGLang's AITER runner runs SGLang's own small-M kernel where it takes the call: SGLang as shipped)."""
    return switched(envs.MAX_TOKENS.name, "0")


MODES = {"off": kernels_off, "shipped": plugin_hands_over}


def _why(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}"


class FallbackTimer:
    """SGLang's FusedMoE layers for one shape and weight format, one per weight copy (row-major weights
    from testdata.make_weights; SGLang lays them out for its own runner). `layers` is empty and `reason`
    says why where they cannot be built here."""

    def __init__(self, shape, weight_format: str, weights: list, device, mode: str = "off"):
        """mode "off": the fallback with SGLANG_ROCM_SMALLM_MOE=0; "shipped": with SGLANG_SMALLM_MAX_TOKENS=0."""
        self.layers, self.reason, self.switch = [], "", MODES[mode]
        try:
            from . import layer_harness

            layer_harness.setup("smallm")
            with self.switch():
                self.layers = [layer_harness.build_layer(shape, weight_format, w, device=device) for w in weights]
        except Exception as e:  # noqa: BLE001 - any failure is a reason shown in the bench, not a crash
            self.layers, self.reason = [], f"the fallback's layer cannot be built here: {_why(e)}"

    def time_us(self, calls) -> tuple:
        """-> (µs per call or None, note): the calls (one per layer, rotated) through the layers' fallback,
        in one CUDA graph; eagerly where the graph cannot be captured (the note says so)."""
        if not self.layers:
            return None, self.reason
        from . import layer_harness

        def body():
            for layer, c in zip(self.layers, calls):
                layer_harness.forward(layer, c.x, c.topk_weights, c.topk_ids)

        with self.switch():
            path = layer_harness.decide(self.layers[0], calls[0]).path
            if not path.startswith("fallback"):
                return None, f"the layer took {path}, not its fallback"
            try:
                return graph_us(body, len(calls)), f"{path}, CUDA graph"
            except Exception as graph_error:  # noqa: BLE001
                graph_why = _why(graph_error)
            try:
                body()
                torch.cuda.synchronize()
                t0, reps = time.perf_counter(), 10
                for _ in range(reps):
                    body()
                torch.cuda.synchronize()
                return (time.perf_counter() - t0) / (reps * len(calls)) * 1e6, f"{path}, eager (graph: {graph_why})"
            except Exception as e:  # noqa: BLE001
                return None, f"{path} not runnable here: {_why(e)}"
