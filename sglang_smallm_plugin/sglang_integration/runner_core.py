"""The `smallm` MoE runner as SGLang sees it, and the glue that lets SGLang's quant methods use it.

How the pieces fit (FP8 block-scale shown; Quark MXFP4 is the same shape):
- create_moe_runner (hooked): SGLang's own method builds the runner it would use without us, the
  *fallback* (AITER on ROCm when available, else Triton), while the plugin presents that backend
  as the selected one. Then the method's runner becomes MoeRunner("smallm"), whose core (below)
  holds the fallback runner and a MoeSelector.
- process_weights_after_loading (hooked): runs SGLang's own code with the fallback runner and
  backend presented, so the weights end up in the layout the fallback needs (AITER-shuffled on
  ROCm); our kernels read that layout.
- apply (hooked): runs SGLang's own code with a facade presented as the runner; the facade
  reports the fallback's backend (so SGLang builds the fallback's quant info) and routes
  run() into the smallm MoeRunner, whose core picks kernel or fallback per call.
"""

import contextlib
import logging

import torch

from ..calls import FP8_BLOCK128, ROW_MAJOR, SHUFFLE16, MoeCall
from ..runner import MoeSelector

logger = logging.getLogger("sglang_smallm")

BACKEND_NAME = "smallm"


def selected_backend_is_smallm() -> bool:
    from sglang.srt.layers.moe.utils import get_moe_runner_backend

    return get_moe_runner_backend().value == BACKEND_NAME


@contextlib.contextmanager
def presenting(method, runner, backend):
    """Temporarily show SGLang code `runner` as method.runner and `backend` as the selected backend."""
    from sglang.srt.runtime_context import get_flags

    moe = get_flags().moe
    saved_backend, saved_runner = moe.runner_backend, getattr(method, "runner", None)
    moe.runner_backend = backend
    method.runner = runner
    try:
        yield
    finally:
        moe.runner_backend = saved_backend
        method.runner = saved_runner


class RunnerFacade:
    """Stands in for method.runner during apply(): looks like the fallback, runs through smallm."""

    def __init__(self, smallm_runner, fallback_backend):
        self._smallm = smallm_runner
        self.runner_backend = fallback_backend

    def run(self, dispatch_output, quant_info, lora_info=None):
        return self._smallm.run(dispatch_output, quant_info, lora_info)

    def __getattr__(self, name):
        return getattr(self._smallm, name)


def _base_class():
    from sglang.srt.layers.moe.moe_runner.base import DispatchMoeRunnerCore

    return DispatchMoeRunnerCore


def make_core_class():
    Base = _base_class()

    class SmallmRunnerCore(Base):
        """DispatchMoeRunnerCore for `smallm`: gate, then kernel provider or the fallback runner."""

        def __init__(self, config):
            super().__init__(config)
            self.fallback_runner = None
            self.fallback_backend = None
            self.fallback_unavailable = None  # reason, when there is no fallback at all
            self.weight_format = None
            self.weight_layout = None  # from the weights' bytes after SGLang's processing (layout_check); None: the flag
            self.inter_pad = 0  # SGLang's layer.intermediate_pad / hidden_pad, read after its processing (layout_check)
            self.hidden_pad = 0
            self.selector = None

        @property
        def runner_backend(self):
            from sglang.srt.layers.moe.utils import RegisteredMoeRunnerBackend

            return RegisteredMoeRunnerBackend(BACKEND_NAME)

        def bind(self, *, weight_format, fallback_runner, fallback_backend, fallback_unavailable=None):
            self.weight_format = weight_format
            self.fallback_runner = fallback_runner
            self.fallback_backend = fallback_backend
            self.fallback_unavailable = fallback_unavailable
            name = fallback_backend.value if fallback_backend is not None else "none"
            self.selector = MoeSelector(name)

        def describe(self, dispatch_output, quant_info, runner_config) -> MoeCall:
            return describe_call(dispatch_output, quant_info, runner_config, self.weight_format, self.weight_layout,
                                 inter_pad=self.inter_pad, hidden_pad=self.hidden_pad)

        def run_from_dispatch(self, dispatch_output, quant_info, runner_config, hooks=None):
            from sglang.srt.layers.moe.token_dispatcher.standard import StandardCombineInput

            call = self.describe(dispatch_output, quant_info, runner_config)
            decision = self.selector.decide(call) if hooks is None else None
            if decision is not None and decision.is_kernel:
                return StandardCombineInput(hidden_states=decision.provider.run(call))
            return self.run_fallback(dispatch_output, quant_info, call)

        def run_fallback(self, dispatch_output, quant_info, call):
            if self.fallback_runner is None:
                raise RuntimeError(
                    f"sglang-smallm: this call ({call.num_tokens} tokens, {call.weight_format}) is not eligible for "
                    f"the small-M kernel and there is no fallback: {self.fallback_unavailable}")
            if (call.device.type == "cpu" and self.fallback_backend is not None
                    and self.fallback_backend.is_triton()):
                raise RuntimeError(
                    "sglang-smallm: fallback runner 'triton' cannot run on CPU tensors (SGLang's Triton MoE "
                    "registers CUDA kernels only); on CPU only the reference provider can serve this layer")
            return self.fallback_runner.run(dispatch_output, quant_info)

    return SmallmRunnerCore


_CORE_CLASS = None


def core_class():
    global _CORE_CLASS
    if _CORE_CLASS is None:
        _CORE_CLASS = make_core_class()
    return _CORE_CLASS


def make_core(config):
    """The factory registered with register_moe_runner_core("smallm", ...)."""
    return core_class()(config)


def smallm_core_of(method):
    """The SmallmRunnerCore behind a quant method's runner, or None when smallm is not in use."""
    runner = getattr(method, "runner", None)
    core = getattr(runner, "runner_core", None)
    return core if _CORE_CLASS is not None and isinstance(core, _CORE_CLASS) else None


def _first(*vals):
    for v in vals:
        if v is not None:
            return v
    return None


def describe_call(dispatch_output, quant_info, config, weight_format, weight_layout=None, *, inter_pad=0,
                  hidden_pad=0) -> MoeCall:
    """SGLang dispatch output + quant info (Triton's, AITER's or ours) + runner config -> MoeCall. The layout is
    `weight_layout` where the bytes decided it (layout_check), else SGLang's is_shuffled flag on w13. inter_pad /
    hidden_pad: SGLang's padding of the layer for AITER (the kernel skips the former; the latter it does not take)."""
    from sglang.srt.layers.moe.topk import TopKOutputChecker

    topk = dispatch_output.topk_output
    x = dispatch_output.hidden_states
    w13, w2 = quant_info.w13_weight, quant_info.w2_weight
    fmt = weight_format
    if not TopKOutputChecker.format_is_standard(topk):
        fmt = f"unsupported:top-k output format {type(topk).__name__}"
        tw = ti = torch.empty(0, 0)
    else:
        tw, ti = topk.topk_weights, topk.topk_ids
    block_shape = getattr(quant_info, "block_shape", None)
    if fmt == FP8_BLOCK128:
        quant_type = getattr(quant_info, "quant_type", None)
        if quant_type is not None:  # AITER quant info
            block_shape = (128, 128) if "128X128" in str(quant_type).upper() else None
        if getattr(quant_info, "use_fp8_w8a8", True) is False or getattr(quant_info, "per_channel_quant", False):
            fmt = "unsupported:not fp8 block-scale"
    if hidden_pad:
        fmt = f"unsupported:hidden size padded by {hidden_pad} for AITER"
    return MoeCall(
        x=x, w13=w13, w2=w2,
        w13_scale=getattr(quant_info, "w13_scale", None), w2_scale=getattr(quant_info, "w2_scale", None),
        topk_weights=tw, topk_ids=ti, weight_format=fmt,
        layout=weight_layout or (SHUFFLE16 if getattr(w13, "is_shuffled", False) else ROW_MAJOR),
        activation=config.activation, is_gated=config.is_gated,
        has_bias=_first(getattr(quant_info, "b13", None), getattr(quant_info, "b2", None)) is not None,
        has_expert_mask=getattr(quant_info, "expert_mask", None) is not None,
        apply_router_weight_on_input=bool(config.apply_router_weight_on_input),
        no_combine=bool(config.no_combine),
        routed_scaling_factor=config.routed_scaling_factor,
        swiglu_params=_first(config.gemm1_alpha, config.gemm1_clamp_limit, config.swiglu_limit) is not None,
        block_shape=tuple(block_shape) if block_shape is not None else None,
        layer_id=config.layer_id, inter_pad=int(inter_pad))


def build_smallm_runner(method, layer, config, *, weight_format, fallback_runner, fallback_backend,
                        fallback_unavailable=None):
    """Replace method.runner by MoeRunner("smallm") bound to the fallback; fail loudly if nothing can serve."""
    from sglang.srt.layers.moe.moe_runner.runner import MoeRunner
    from sglang.srt.layers.moe.utils import RegisteredMoeRunnerBackend

    from .. import envs

    envs.check()  # a switch set to a value it does not take fails the startup, naming the fix
    ep = int(getattr(layer, "moe_ep_size", 1) or 1)
    if ep > 1:
        raise RuntimeError(
            f"sglang-smallm: --moe-runner-backend smallm supports expert-parallel size 1 (tensor parallel only); "
            f"this layer has ep_size={ep}. Fix: drop --ep-size, or use --moe-runner-backend "
            f"{fallback_backend.value if fallback_backend is not None else 'aiter'}.")
    from .. import measured_caps

    if measured_caps.file_path() and torch.cuda.is_available():  # measured on another arch: refused (CPU: no caps)
        from .. import kernels
        from ..runner import log_once

        caps_note = measured_caps.check_device(kernels.device_info().arch)
        log_once(("caps-file", measured_caps.file_path()), "sglang-smallm: %s", caps_note)
    config.layer = layer
    runner = MoeRunner(RegisteredMoeRunnerBackend(BACKEND_NAME), config)
    core = runner.runner_core
    core.bind(weight_format=weight_format, fallback_runner=fallback_runner, fallback_backend=fallback_backend,
              fallback_unavailable=fallback_unavailable)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    avail = core.selector.availability(device)
    if envs.KERNELS.enabled() and not any(ok for _, ok, _ in avail):
        raise RuntimeError(
            "sglang-smallm: --moe-runner-backend smallm was requested, but no small-M kernel can run here: "
            + "; ".join(f"{n}: {why}" for n, _, why in avail)
            + f". Fix: install the compiled kernels on a gfx950 (MI355X) or sm_90 (H100/H200) machine "
            f"(`pip install --no-build-isolation sglang-smallm-plugin`, see `sglang-smallm doctor`), or set "
            f"{envs.KERNELS.name}=0 to run the fallback, or pick another --moe-runner-backend.")
    if fallback_runner is None and device != "cpu" and envs.KERNELS.enabled():
        raise RuntimeError(
            f"sglang-smallm: {fallback_unavailable}. Calls above the small-M cap would have no runner. "
            "Fix: run this checkpoint on ROCm with AITER, or pick another --moe-runner-backend.")
    if fallback_runner is None and device != "cpu" and not envs.KERNELS.enabled():
        raise RuntimeError(f"sglang-smallm: {envs.KERNELS.name}=0 but {fallback_unavailable}.")
    if weight_format == FP8_BLOCK128 and fallback_backend is not None and fallback_backend.value == "triton":
        from ..gate import user_max_tokens
        from ..runner import log_once
        from .triton_configs import tuned_fallback_note, user_fp8_configs

        E = int(getattr(layer, "num_local_experts", 0) or getattr(layer, "num_experts", 0))
        N = int(getattr(layer, "intermediate_size_per_partition", 0))
        note = tuned_fallback_note(E, N, user_fp8_configs(E, N), user_max_tokens() is not None)
        if note:  # once per shape, not per layer
            log_once(("tuned-fallback", E, N), note, level=logging.WARNING)
    if fallback_runner is not None:
        from .sort import after_fallback_built

        after_fallback_built(fallback_backend)
    method.runner = runner
    method._owns_moe_runner = True
    layer.smallm_core = core
    return runner
