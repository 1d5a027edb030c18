"""sglang-smallm-plugin: fast small-batch MoE decode for SGLang (gfx950 first, sm_90a too).

Installed into an unmodified SGLang, the entry point `register` (group sglang.srt.plugins)
adds `--moe-runner-backend smallm`. Importing this package imports neither SGLang nor the
compiled kernels; both load lazily.
"""

__version__ = "0.1.0"


def register() -> None:
    """SGLang plugin entry point: runs once in every process SGLang loads plugins in."""
    from .sglang_integration import register as _register

    _register()
