"""Which SGLang is installed, and does it expose the plugin APIs we need (0.5.19+)."""

import importlib
import importlib.metadata

MIN_SGLANG = "0.5.19"
TESTED_SGLANG = "0.5.23"

# (module, attribute) pairs the plugin relies on
REQUIRED_APIS = (
    ("sglang.srt.plugins", "load_plugins"),
    ("sglang.srt.plugins.hook_registry", "HookRegistry"),
    ("sglang.srt.server_args", "add_moe_runner_backend_choices"),
    ("sglang.srt.layers.moe.moe_runner.runner", "register_moe_runner_core"),
    ("sglang.srt.layers.moe.moe_runner.base", "DispatchMoeRunnerCore"),
    ("sglang.srt.layers.moe.utils", "RegisteredMoeRunnerBackend"),
)


def _vtuple(v: str) -> tuple:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def sglang_version():
    """The installed SGLang's version; for an SGLang importable without distribution metadata (a source
    checkout or an unpacked wheel on PYTHONPATH), the one its own `sglang.version` reports; None where
    SGLang cannot be imported."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return importlib.import_module("sglang.version").__version__
    except Exception:  # not importable at all: reported as not installed
        return None


def probe() -> tuple:
    """-> (ok, message). Never raises."""
    v = sglang_version()
    if v is None:
        return False, "SGLang is not installed"
    if _vtuple(v) < _vtuple(MIN_SGLANG):
        return False, f"SGLang {v} found, but sglang-smallm needs SGLang >= {MIN_SGLANG} (tested with {TESTED_SGLANG})"
    missing = []
    for mod, attr in REQUIRED_APIS:
        try:
            if not hasattr(importlib.import_module(mod), attr):
                missing.append(f"{mod}.{attr}")
        except Exception as e:  # an import error inside SGLang is reported, not raised
            missing.append(f"{mod} ({type(e).__name__}: {e})")
    if missing:
        return False, (f"SGLang {v} lacks the plugin APIs sglang-smallm needs (minimum {MIN_SGLANG}): "
                       + ", ".join(missing))
    return True, f"SGLang {v} (plugin APIs present; tested with {TESTED_SGLANG})"
