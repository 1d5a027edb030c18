"""Hooks on SGLang's Quark W4A4 MXFP4 MoE scheme for --moe-runner-backend smallm.

SGLang runs this scheme only through AITER (ROCm). With AITER present, the fallback is the AITER
runner and the weights keep AITER's layout (shuffled weights, e8m0_shuffle'd scales). Without
AITER (CUDA, CPU) SGLang has no runner for it at all: the plugin serves the calls its kernel (or, on
CPU, the reference) can take, keeps the checkpoint layout (row-major, plain scales), and refuses
at startup on a GPU, since larger batches would have nowhere to go.
"""

from dataclasses import dataclass
from typing import Optional

import torch

from ..calls import MXFP4
from .runner_core import (RunnerFacade, build_smallm_runner, presenting, selected_backend_is_smallm,
                          smallm_core_of)

TARGET = "sglang.srt.layers.quantization.quark.schemes.quark_w4a4_mxfp4_moe.QuarkW4A4MXFp4MoE"
NO_AITER = "SGLang's Quark W4A4 MXFP4 MoE scheme runs only on the AITER runner (ROCm with SGLANG_USE_AITER=1)"


def _aiter_in_use() -> bool:
    from sglang.srt.layers.quantization.quark.schemes import quark_w4a4_mxfp4_moe as mod

    return bool(getattr(mod, "_use_aiter", False))


@dataclass
class SmallmMxfp4QuantInfo:
    """Quant info the plugin builds itself where SGLang has no MXFP4 runner (no AITER)."""

    w13_weight: torch.Tensor
    w2_weight: torch.Tensor
    w13_scale: torch.Tensor
    w2_scale: torch.Tensor
    expert_mask: Optional[torch.Tensor] = None

    @classmethod
    def from_layer(cls, layer) -> "SmallmMxfp4QuantInfo":
        return cls(w13_weight=layer.w13_weight, w2_weight=layer.w2_weight,
                   w13_scale=layer.w13_weight_scale, w2_scale=layer.w2_weight_scale)


def around_create_moe_runner(original, self, layer, moe_runner_config, *args, **kwargs):
    if not selected_backend_is_smallm():
        return original(self, layer, moe_runner_config, *args, **kwargs)
    from sglang.srt.layers.moe.utils import MoeRunnerBackend

    if _aiter_in_use():
        with presenting(self, None, MoeRunnerBackend.AITER):
            original(self, layer, moe_runner_config, *args, **kwargs)
            fallback, backend, why = self.runner, MoeRunnerBackend.AITER, None
    else:
        self.moe_runner_config = moe_runner_config
        fallback, backend, why = None, None, NO_AITER
    build_smallm_runner(self, layer, moe_runner_config, weight_format=MXFP4, fallback_runner=fallback,
                        fallback_backend=backend, fallback_unavailable=why)


def around_process_weights_after_loading(original, self, layer, *args, **kwargs):
    core = smallm_core_of(self)
    if core is None:
        return original(self, layer, *args, **kwargs)
    from .layout_check import processed_and_checked
    from .weights import prepare_workspace

    if core.fallback_runner is not None:
        with presenting(self, core.fallback_runner, core.fallback_backend):
            result = processed_and_checked(core, layer, MXFP4, lambda: original(self, layer, *args, **kwargs))
        prepare_workspace(layer)
        return result
    # No AITER: SGLang's own method would call AITER's shuffles; keep the checkpoint layout instead.
    for name in ("w13_weight", "w2_weight", "w13_weight_scale", "w2_weight_scale"):
        t = getattr(layer, name)
        if t.dtype != torch.uint8:
            raise RuntimeError(f"sglang-smallm: Quark MXFP4 {name} is {t.dtype}, expected packed uint8")
    prepare_workspace(layer)
    return None


def around_apply_weights(original, self, layer, dispatch_output, *args, **kwargs):
    core = smallm_core_of(self)
    if core is None:
        return original(self, layer, dispatch_output, *args, **kwargs)
    if core.fallback_runner is not None:
        with presenting(self, RunnerFacade(self.runner, core.fallback_backend), core.fallback_backend):
            return original(self, layer, dispatch_output, *args, **kwargs)
    return self.runner.run(dispatch_output, SmallmMxfp4QuantInfo.from_layer(layer))


HOOKS = (
    (f"{TARGET}.create_moe_runner", around_create_moe_runner),
    (f"{TARGET}.process_weights_after_loading", around_process_weights_after_loading),
    (f"{TARGET}.apply_weights", around_apply_weights),
)
