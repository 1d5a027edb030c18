"""Runner core logic, free of SGLang: per call, the gate picks a kernel provider or the fallback.

Selection: providers in priority order; the first whose supports(call) says yes runs the call.
Otherwise the fallback runs it (the runner SGLang would have used without the plugin), with the
reasons recorded. SGLANG_ROCM_SMALLM_MOE=0 sends every call to the fallback. Decisions are logged
once per (layer shape, path), on rank 0 only, and cached per call signature so that the gate's
Python runs once per shape/token count, not once per call.
"""

import logging
from dataclasses import dataclass
from typing import Optional

import torch

from . import envs, hookspecs, kernels
from .calls import MoeCall

logger = logging.getLogger("sglang_smallm")


@dataclass(frozen=True)
class Decision:
    path: str                # "kernel:<provider>" or "fallback:<backend>"
    reason: str
    provider: Optional[object] = None

    @property
    def is_kernel(self) -> bool:
        return self.provider is not None


def rank() -> int:
    try:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank()
    except (RuntimeError, ValueError):
        pass
    return 0


_logged: set = set()
_disabled_logged = False


def log_once(key, msg: str, *args, level: int = logging.INFO) -> None:
    if key in _logged:
        return
    _logged.add(key)
    if rank() == 0 or envs.LOG_ALL_RANKS.enabled():
        logger.log(level, msg, *args)


def _signature(call: MoeCall) -> tuple:
    def t(x):
        return None if x is None else (x.dtype, tuple(x.shape), x.stride(), x.device, x.data_ptr())

    return (call.num_tokens, t(call.w13), t(call.w2), t(call.w13_scale), t(call.w2_scale),
            call.x.dtype, call.x.stride(), call.x.device, call.topk_ids.dtype, call.topk_ids.stride(),
            call.topk_weights.dtype, call.topk_weights.stride(), call.weight_format, call.layout,
            call.activation, call.is_gated, call.has_bias, call.has_expert_mask,
            call.apply_router_weight_on_input, call.no_combine, call.swiglu_params,
            None if call.block_shape is None else tuple(call.block_shape))


class MoeSelector:
    """Chooses kernel or fallback for one layer's calls."""

    def __init__(self, fallback_name: str, providers=None):
        self.fallback_name = fallback_name
        self.providers = list(providers) if providers is not None else hookspecs.moe_providers()
        self._cache: dict = {}

    def availability(self, device) -> list:
        """[(provider name, can serve on this device ever, reason)] for startup checks and doctor."""
        return [(p.name, *p.available(device)) for p in self.providers]

    def decide(self, call: MoeCall) -> Decision:
        global _disabled_logged
        if not envs.KERNELS.enabled():
            if not _disabled_logged:
                _disabled_logged = True
                if rank() == 0 or envs.LOG_ALL_RANKS.enabled():
                    logger.info("sglang-smallm: %s=0: every MoE call takes the fallback (%s)",
                                envs.KERNELS.name, self.fallback_name)
            return Decision(f"fallback:{self.fallback_name}", f"{envs.KERNELS.name}=0")
        sig = _signature(call)
        hit = self._cache.get(sig)
        if hit is not None:
            return hit
        reasons = []
        decision = None
        for p in self.providers:
            ok, why = p.supports(call)
            if ok:
                decision = Decision(f"kernel:{p.name}", why, p)
                break
            reasons.append(f"{p.name}: {why}")
        if decision is None:
            decision = Decision(f"fallback:{self.fallback_name}", "; ".join(reasons) or "no kernel provider registered")
        if len(self._cache) < 4096:
            self._cache[sig] = decision
        plan = ""
        if decision.path == "kernel:smallm-compiled":
            plan = kernels.kernel_plan(kernels.device_info(call.x.device).arch, call.weight_format,
                                       call.num_tokens, call.top_k, call.hidden, call.inter, layout=call.layout)
        log_once((call.shape_key(), decision.path, plan),
                 "sglang-smallm: layer %s %s E=%d D=%d I=%d K=%d tokens=%d -> %s (%s)%s%s",
                 call.layer_id, call.weight_format, call.num_experts, call.hidden, call.inter, call.top_k,
                 call.num_tokens, decision.path, decision.reason, f"; runs {plan}" if plan else "",
                 f"; {kernels.variant_note()}" if decision.path.startswith("kernel:") else "")
        return decision
