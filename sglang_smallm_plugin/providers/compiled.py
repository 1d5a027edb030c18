"""The compiled small-M kernels (hip/), as a provider. Present when the extension was built."""

import logging

from .. import gate, kernels, measured_caps, sort_gate
from ..calls import MoeCall, SortCall


class CompiledMoeProvider:
    name = "smallm-compiled"
    priority = 100

    def available(self, device) -> tuple:
        info = kernels.device_info(device)
        if info.kind == "cpu":
            return False, "no GPU: the compiled kernels need gfx950 or sm_90"
        mod, why = kernels.load_compiled()
        if mod is None:
            return False, why
        built = kernels.compiled_arch() or "?"
        if not any(info.arch.startswith(a) for a in gate.SUPPORTED_ARCHS):
            return False, f"device {info.name} ({info.arch}) is not gfx950 or sm_90"
        if not _arch_matches(built, info.arch):
            return False, f"kernels were built for {built} but the device is {info.arch}; rebuild on this machine"
        return True, f"{info.name} ({info.arch}), kernels built for {built}"

    def supports(self, call: MoeCall) -> tuple:
        ok, why = self.available(call.device)
        if not ok:
            return False, why
        arch = kernels.device_info(call.device).arch
        missing = measured_caps.missing_entry(arch, call.weight_format, call.layout, call.hidden, call.inter,
                                              call.num_experts, call.top_k)
        if missing:  # a caps file that says nothing of this layer: the built-in cap decides, and the log says so
            from ..runner import log_once

            log_once(("caps-missing", arch, call.weight_format, call.layout, call.hidden, call.inter,
                      call.num_experts, call.top_k), missing, level=logging.WARNING)
        return gate.evaluate(call, arch)

    def run(self, call: MoeCall):
        return kernels.run_moe(call)


class CompiledSortProvider:
    name = "smallm-sort"
    priority = 100

    def available(self, device) -> tuple:
        return CompiledMoeProvider.available(self, device)

    def supports(self, call: SortCall) -> tuple:
        ok, why = self.available(call.topk_ids.device)
        if not ok:
            return False, why
        return gate_sort(call, kernels.device_info(call.topk_ids.device).arch)

    def run(self, call: SortCall):
        return run_sort_on(call, kernels.device_info(call.topk_ids.device).arch)


def gate_sort(call: SortCall, arch: str) -> tuple:
    """The sort gate's answer for `arch`; the path it chose is kept on the call for run_sort_on."""
    path, why = sort_gate.choose_path(call, arch)
    call.extra["sort_path"] = path  # run_sort_on uses the path the gate chose
    return path is not None, why


def run_sort_on(call: SortCall, arch: str, ops=None):
    """The sort on the path gate_sort chose (chosen now where it was not asked), through `ops` (kernels.run_sort)."""
    path = call.extra.get("sort_path")
    if path is None:
        path, why = sort_gate.choose_path(call, arch)
        if path is None:
            raise RuntimeError(f"sglang-smallm: sort called on an ineligible call ({why})")
    return kernels.run_sort(call, path, ops=ops)


def _arch_matches(built: str, device_arch: str) -> bool:
    built = built.replace("sm_90a", "sm_90")
    return any(device_arch.startswith(b.strip()) for b in built.split(",") if b.strip())
