"""The gfx950 build emulated on a CPU (sglang_smallm_plugin/emulated.py) as providers: registered only when
SGLANG_SMALLM_EMULATE=1, for development without an AMD GPU. They serve CPU tensors under gfx950's own gate
(its caps, rules and sort paths), so SGLang's layer on a CPU sends the calls an MI355X would run through the
kernels' gfx950 code, and the rest to its fallback. Very slow; never chosen on a GPU."""

from .. import emulated, gate, kernels
from ..calls import MoeCall, SortCall
from .compiled import gate_sort, run_sort_on


def _available(device) -> tuple:
    if not str(device).startswith("cpu"):
        return False, "the gfx950 emulation serves CPU tensors only"
    why = emulated.unavailable_reason()
    if why:
        return False, f"the gfx950 emulation cannot be built here: {why}"
    return True, f"{emulated.ARCH} emulated on this CPU (SGLANG_SMALLM_EMULATE=1; development only)"


class EmulatedMoeProvider:
    name = "gfx950-emulated"
    priority = 50  # below the compiled kernels, above the reference

    def available(self, device) -> tuple:
        return _available(device)

    def supports(self, call: MoeCall) -> tuple:
        ok, why = self.available(call.device)
        if not ok:
            return False, why
        return gate.evaluate(call, emulated.ARCH)

    def run(self, call: MoeCall):
        return kernels.run_moe(call, ops=emulated.load())


class EmulatedSortProvider:
    name = "gfx950-emulated-sort"
    priority = 50

    def available(self, device) -> tuple:
        return _available(device)

    def supports(self, call: SortCall) -> tuple:
        ok, why = self.available(call.topk_ids.device)
        if not ok:
            return False, why
        return gate_sort(call, emulated.ARCH)

    def run(self, call: SortCall):
        return run_sort_on(call, emulated.ARCH, ops=emulated.load())
