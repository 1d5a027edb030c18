"""Plugin entry: registers the `smallm` backend, its runner core and the hooks, once per process.

SGLang calls `sglang_smallm_plugin:register` (entry-point group sglang.srt.plugins) in the main
process and first thing in every scheduler process (spawned), then applies registered hooks.
Everything here is idempotent. SGLang logs and swallows plugin errors, so failures are logged
here with the reason, and a failed registration changes nothing.
"""

import inspect
import logging

from . import compat

logger = logging.getLogger("sglang_smallm")

_registered = False
_hooks_registered = False


def _hook_modules():
    from . import fp8, quark, sort

    return (fp8, quark, sort)


def _register_backend(name: str) -> None:
    from sglang.srt.layers.moe.moe_runner import runner as runner_mod
    from sglang.srt.server_args import add_moe_runner_backend_choices

    from .runner_core import make_core

    choices = getattr(add_moe_runner_backend_choices, "__self__", None)
    if not isinstance(choices, list) or name not in choices:
        add_moe_runner_backend_choices([name])
    if name not in getattr(runner_mod, "_CUSTOM_RUNNER_CORE_FACTORIES", {}):
        runner_mod.register_moe_runner_core(name, make_core)


def _register_hooks() -> None:
    global _hooks_registered
    if _hooks_registered:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for mod in _hook_modules():
        for target, fn in mod.HOOKS:
            HookRegistry.register(target, fn, HookType.AROUND)
    _hooks_registered = True


def hooks_status() -> list:
    """[(target, applied)] by looking at the live attributes (HookRegistry only logs failures)."""
    import pkgutil

    out = []
    for mod in _hook_modules():
        for target, _fn in mod.HOOKS:
            owner, attr = target.rsplit(".", 1)
            try:
                live = getattr(pkgutil.resolve_name(owner), attr)
                out.append((target, inspect.unwrap(live) is not live))
            except Exception as e:  # reported, never raised
                out.append((target, f"unresolvable: {type(e).__name__}: {e}"))
    return out


def register() -> None:
    global _registered
    if _registered:
        return
    ok, msg = compat.probe()
    if not ok:
        logger.error("sglang-smallm: %s. The plugin is inactive and changes nothing.", msg)
        return
    try:
        from .runner_core import BACKEND_NAME

        _register_backend(BACKEND_NAME)
        _register_hooks()
        from sglang.srt.plugins.hook_registry import HookRegistry

        HookRegistry.apply_hooks()  # idempotent; load_plugins() applies again after all plugins ran
    except Exception:
        logger.exception("sglang-smallm: registration failed; --moe-runner-backend smallm is unavailable")
        return
    missing = [t for t, applied in hooks_status() if applied is not True]
    if missing:
        logger.error("sglang-smallm: hooks not applied on %s; smallm cannot serve those methods", missing)
    _registered = True
    logger.info("sglang-smallm: registered --moe-runner-backend smallm (%s)", msg)
