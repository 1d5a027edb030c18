"""SGLang's own gfx950 small-M MoE kernel, as it stands beside this plugin.

SGLang 0.5.23 ships one (`sglang.kernels.ops.moe.smallm_moe_gfx950`): its AITER runner calls it, before
`aiter.fused_moe`, for Qwen3.5-397B's shapes only (hidden 4096; FP8 block-scale at per-rank I = 256 / 128,
MXFP4 at I = 256) up to its own token caps (FP8 20 / 48, MXFP4 40: the crossovers this plugin's MI355X caps
were taken from), on gfx950 with ROCm >= 7.2 and hipcc present, compiled at first use. It reads the same
switch as this plugin: `SGLANG_ROCM_SMALLM_MOE=0` turns both off. With `--moe-runner-backend smallm` the AITER
runner is the fallback, so SGLang's kernel can still serve a call the plugin hands over when that call is
inside SGLang's caps and shapes (at the default caps the two coincide, so it does not; with
`SGLANG_SMALLM_MAX_TOKENS` below them, or a call the plugin's gate refuses, it can). What a fallback call runs
is then SGLang's choice, as it would be without the plugin.
"""

import importlib

import torch

MODULE = "sglang.kernels.ops.moe.smallm_moe_gfx950"


def status() -> str:
    """One line for `doctor`: whether this SGLang has the kernel, its caps, and whether it is on here."""
    try:
        mod = importlib.import_module(MODULE)
    except Exception as e:  # noqa: BLE001 - an SGLang without it, or one whose import fails here
        return f"none in this SGLang ({type(e).__name__}: {str(e)[:80]})"
    caps = (f"FP8 up to {getattr(mod, 'MAX_TOK_DISPATCH_FP8', '?')} tokens, MXFP4 up to "
            f"{getattr(mod, 'MAX_TOK_DISPATCH', '?')} (by per-rank I), hidden {getattr(mod, 'DIM', '?')} only")
    if not (torch.version.hip and torch.cuda.is_available()):
        return f"in this SGLang ({caps}); gfx950 with ROCm >= 7.2 only, so not on this machine"
    try:
        on = bool(mod.smallm_moe_enabled())
    except Exception as e:  # noqa: BLE001
        return f"in this SGLang ({caps}); its enabled() check failed: {type(e).__name__}: {str(e)[:80]}"
    if not on:
        return (f"in this SGLang ({caps}), not enabled here (SGLANG_ROCM_SMALLM_MOE=0, or not gfx950 / ROCm >= 7.2 / "
                f"hipcc; SGLang logs which)")
    return (f"enabled ({caps}): SGLang's AITER runner, this plugin's fallback, runs it for calls handed over "
            f"inside those caps and shapes (none at the default caps); SGLANG_ROCM_SMALLM_MOE=0 turns it off too. "
            f"Which of the two is faster here is not known until measured: `sglang-smallm bench --shapes <yours> "
            f"--layouts row_major,shuffle16x16 --write-caps FILE` times both and writes caps for "
            f"SGLANG_SMALLM_CAPS_FILE")


def enabled_here() -> bool:
    """SGLang's own kernel is in this SGLang and enabled on this machine (so SGLang as shipped differs from its
    fallback with SGLANG_ROCM_SMALLM_MOE=0, and `bench` times both)."""
    if not (torch.version.hip and torch.cuda.is_available()):
        return False
    try:
        return bool(importlib.import_module(MODULE).smallm_moe_enabled())
    except Exception:  # noqa: BLE001 - absent or failing: not enabled
        return False
