"""Hooks on SGLang's Fp8MoEMethod (FP8 128x128 block-scale MoE) for --moe-runner-backend smallm."""

from ..calls import FP8_BLOCK128
from .runner_core import (RunnerFacade, build_smallm_runner, presenting, selected_backend_is_smallm,
                          smallm_core_of)

TARGET = "sglang.srt.layers.quantization.fp8.Fp8MoEMethod"


def fallback_backend():
    """The runner SGLang would use for FP8 MoE without the plugin: AITER on ROCm when available, else Triton."""
    from sglang.srt.layers.moe.utils import MoeRunnerBackend, get_moe_a2a_backend
    from sglang.srt.layers.quantization import fp8 as fp8_mod

    if getattr(fp8_mod, "_is_hip", False) and getattr(fp8_mod, "_use_aiter", False) and \
            get_moe_a2a_backend().supports_aiter():
        return MoeRunnerBackend.AITER
    return MoeRunnerBackend.TRITON


def around_create_moe_runner(original, self, layer, moe_runner_config, *args, **kwargs):
    if not selected_backend_is_smallm():
        return original(self, layer, moe_runner_config, *args, **kwargs)
    backend = fallback_backend()
    with presenting(self, None, backend):
        original(self, layer, moe_runner_config, *args, **kwargs)
        fallback_runner = self.runner
    build_smallm_runner(self, layer, moe_runner_config, weight_format=FP8_BLOCK128,
                        fallback_runner=fallback_runner, fallback_backend=backend)


def around_process_weights_after_loading(original, self, layer, *args, **kwargs):
    core = smallm_core_of(self)
    if core is None:
        return original(self, layer, *args, **kwargs)
    from .layout_check import processed_and_checked
    from .weights import prepare_workspace

    with presenting(self, core.fallback_runner, core.fallback_backend):
        result = processed_and_checked(core, layer, FP8_BLOCK128, lambda: original(self, layer, *args, **kwargs))

    prepare_workspace(layer)
    return result


def around_apply(original, self, *args, **kwargs):
    core = smallm_core_of(self)
    if core is None:
        return original(self, *args, **kwargs)
    with presenting(self, RunnerFacade(self.runner, core.fallback_backend), core.fallback_backend):
        return original(self, *args, **kwargs)


HOOKS = (
    (f"{TARGET}.create_moe_runner", around_create_moe_runner),
    (f"{TARGET}.process_weights_after_loading", around_process_weights_after_loading),
    (f"{TARGET}.apply", around_apply),
)
