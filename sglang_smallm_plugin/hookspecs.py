"""pluggy hook specifications (project name "sglang_smallm") and the plugin manager.

Kernel providers register through these hooks, in the style of Simon Willison's `llm`:

    import sglang_smallm_plugin.hookspecs as hs

    @hs.hookimpl
    def register_moe_kernels(register):
        register(MyProvider())

A provider has `name`, `priority` (higher is tried first), `available(device) -> (bool, reason)`
(can it ever serve on this machine), `supports(call) -> (bool, reason)` and `run(call)`.
Third-party providers are found under the entry-point group "sglang_smallm".
"""

import logging
import sys
import threading

import pluggy

from . import envs

PROJECT = "sglang_smallm"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

logger = logging.getLogger("sglang_smallm")


@hookspec
def register_moe_kernels(register):
    """Call register(provider) for each fused MoE kernel provider (run(call: MoeCall) -> Tensor)."""


@hookspec
def register_sort_kernels(register):
    """Call register(provider) for each MoE sort provider (run(call: SortCall) -> tuple)."""


_pm = None
_lock = threading.Lock()


def get_plugin_manager() -> pluggy.PluginManager:
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager(PROJECT)
            pm.add_hookspecs(sys.modules[__name__])
            from .providers import builtin

            pm.register(builtin, name="builtin")
            pm.load_setuptools_entrypoints(PROJECT)
            if envs.TRACE.enabled():
                pm.add_hookcall_monitoring(
                    lambda name, impls, kwargs: logger.info("smallm hook %s -> %s", name, [i.plugin_name for i in impls]),
                    lambda outcome, name, impls, kwargs: logger.info("smallm hook %s done", name),
                )
            _pm = pm
        return _pm


def _collect(hook_name: str) -> list:
    found = []
    getattr(get_plugin_manager().hook, hook_name)(register=found.append)
    return sorted(found, key=lambda p: -p.priority)


def moe_providers() -> list:
    return _collect("register_moe_kernels")


def sort_providers() -> list:
    return _collect("register_sort_kernels")


def reload_providers() -> None:
    """Forget the plugin manager: its next use registers the providers anew (after a switch that decides which
    providers register, SGLANG_SMALLM_EMULATE, changed)."""
    global _pm
    with _lock:
        _pm = None


def reset_for_tests() -> None:
    reload_providers()
