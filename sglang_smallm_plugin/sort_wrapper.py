"""The MoE sort wrapper: per call, a sort kernel provider when its gate says yes, else the original.

Wraps the sort the fallback runner uses (SGLang's moe_align_block_size for the Triton runner on
CUDA; AITER's sorting on ROCm once a compiled sort provider exists). Active only while
`--moe-runner-backend smallm` is selected and SGLANG_ROCM_SMALLM_MOE is not 0; every call it does
not take falls through to the original function, unchanged.
"""

import logging

from . import envs, hookspecs
from .calls import SortCall
from .runner import log_once

logger = logging.getLogger("sglang_smallm")


class SortSelector:
    def __init__(self, providers=None):
        self._providers = providers

    @property
    def providers(self):
        if self._providers is None:
            self._providers = hookspecs.sort_providers()
        return self._providers

    def decide(self, call: SortCall):
        """-> (provider or None, reason)."""
        if not envs.KERNELS.enabled():
            return None, f"{envs.KERNELS.name}=0"
        reasons = []
        for p in self.providers:
            ok, why = p.supports(call)
            if ok:
                return p, why
            reasons.append(f"{p.name}: {why}")
        return None, "; ".join(reasons) or "no sort provider registered"


def wrap_sort(original, describe, is_active, selector=None, present=None):
    """Build an AROUND hook body: describe(*args, **kwargs) -> (SortCall or None, reason);
    present(call, SortOutput) -> what the original returns (default: the format's tuple)."""
    selector = selector or SortSelector()
    present = present or (lambda call, out: out.as_tuple(call.output_format))

    def wrapper(*args, **kwargs):
        if not is_active():
            return original(*args, **kwargs)
        call, why = describe(*args, **kwargs)
        provider = None
        if call is not None:
            provider, why = selector.decide(call)
        path = f"sort:{provider.name}" if provider is not None else "sort:original"
        log_once(("sort", path, None if call is None else call.output_format),
                 "sglang-smallm: MoE sort -> %s (%s)", path, why)
        if provider is None:
            return original(*args, **kwargs)
        return present(call, provider.run(call))

    return wrapper
