"""The layout the kernel reads a layer's weights in, taken from the bytes SGLang's processing left, not from flags.

SGLang's `process_weights_after_loading` puts the weights in the layout its runner needs: untouched for Triton,
AITER's (16,16) shuffle (and, for MXFP4, `e8m0_shuffle`d scales) for AITER on gfx950, other layouts on other paths
(AITER's gate/up-interleaved a16w4 layout for activation "situ", gfx1250's, FP4 experts dequantised to FP8). It
marks the shuffled ones with `is_shuffled` on most paths but not all (in SGLang 0.5.23 the FP8 MoE method's
branch for FP4 experts dequantised to FP8 shuffles without setting it). A kernel that read a layout other than the
one the bytes are in would give wrong answers without any error, so the plugin checks: it keeps a copy of expert
0's weights and scales as loaded, lets SGLang process them, and compares what SGLang left with each layout the
kernel reads, applied to the copy (row-major: unchanged; shuffle16x16: `reference.shuffle_weight`, for MXFP4 also
`reference.e8m0_shuffle` of the scales; FP8 scales are not shuffled). Exactly one match decides the layout; none
makes the layout "unrecognised" (the gate then sends every call of the layer to the fallback, with the reason);
two (bytes that look the same both ways, e.g. all zeros) leave SGLang's flag to decide, and say so.
"""

import logging
from dataclasses import dataclass
from typing import Optional

import torch

from ..calls import FP8_BLOCK128, MXFP4, ROW_MAJOR, SHUFFLE16

WEIGHTS = ("w13_weight", "w2_weight")
SCALES = {FP8_BLOCK128: ("w13_weight_scale_inv", "w2_weight_scale_inv"), MXFP4: ("w13_weight_scale", "w2_weight_scale")}
UNRECOGNISED = "unrecognised"


@dataclass
class Loaded:
    """One parameter as loaded: its shape and dtype, and a copy of expert 0."""

    shape: tuple
    dtype: torch.dtype
    expert0: torch.Tensor


@dataclass
class LayoutVerdict:
    layout: Optional[str]  # ROW_MAJOR, SHUFFLE16, "unrecognised: ..." or None (not decided by the bytes)
    how: str               # a sentence for the log


def snapshot(layer, weight_format: str) -> dict:
    """{parameter name: Loaded} for the weights and scales the kernel reads; {} where they cannot be read."""
    out = {}
    for name in WEIGHTS + SCALES.get(weight_format, ()):
        t = getattr(layer, name, None)
        if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[0] == 0 or t.device.type == "meta":
            return {}
        out[name] = Loaded(tuple(t.shape), t.dtype, t.detach()[0].clone())
    return out


def _expected(name: str, weight_format: str, layout: str, before: torch.Tensor) -> torch.Tensor:
    """Expert 0 of `name` as the kernel would read it in `layout`, made from the loaded copy (bytes)."""
    from ..reference import e8m0_shuffle, shuffle_weight

    b = before.contiguous().view(torch.uint8)
    if layout == ROW_MAJOR:
        return b
    if name in WEIGHTS:
        return shuffle_weight(b)
    if weight_format == MXFP4:
        return e8m0_shuffle(b)[: b.shape[0]]
    return b  # FP8 block scales: fp32, never shuffled


def _matches(name, weight_format, layout, loaded: Loaded, now: torch.Tensor) -> bool:
    try:
        want = _expected(name, weight_format, layout, loaded.expert0)
    except (ValueError, RuntimeError):  # the shape cannot be in that layout
        return False
    got = now.detach()[0].contiguous().view(torch.uint8)
    return got.shape == want.shape and torch.equal(got, want)


def verify(layer, weight_format: str, loaded: dict) -> LayoutVerdict:
    """The layout of `layer`'s weights now, against `loaded` (snapshot() before SGLang's processing)."""
    if not loaded:
        return LayoutVerdict(None, "not checked (no copy of the loaded weights)")
    for name, was in loaded.items():
        now = getattr(layer, name, None)
        if not isinstance(now, torch.Tensor) or now.dim() != 3 or now.dtype != was.dtype or \
                tuple(now.shape[:2]) != was.shape[:2] or (name in WEIGHTS and tuple(now.shape) != was.shape):
            what = "gone" if not isinstance(now, torch.Tensor) else f"{now.dtype} {tuple(now.shape)}"
            return LayoutVerdict(f"{UNRECOGNISED}: SGLang's processing changed {name} from {was.dtype} {was.shape} "
                                 f"to {what}", f"{name} rewritten by SGLang's processing")
    fits = [lay for lay in (ROW_MAJOR, SHUFFLE16)
            if all(_matches(n, weight_format, lay, was, getattr(layer, n)) for n, was in loaded.items())]
    if len(fits) == 1:
        return LayoutVerdict(fits[0], f"expert 0's weights and scales as SGLang left them are the loaded ones in {fits[0]}")
    if fits:
        return LayoutVerdict(None, "expert 0's bytes read the same in every layout (e.g. all zeros): SGLang's "
                                   "is_shuffled flag decides")
    odd = [n for n, was in loaded.items()
           if not any(_matches(n, weight_format, lay, was, getattr(layer, n)) for lay in (ROW_MAJOR, SHUFFLE16))]
    which = ", ".join(odd) if odd else "the weights and scales together"
    return LayoutVerdict(f"{UNRECOGNISED}: after SGLang's processing {which} is in neither row-major nor AITER's "
                         f"(16,16) shuffle of the loaded bytes", f"{which} in a layout the kernel does not read")


def padding(layer) -> tuple:
    """(intermediate_pad, hidden_pad): the zeros SGLang appended for AITER (Quark MXFP4 pads the per-rank I so
    that w2's packed K is a multiple of 128 bytes; 0, 0 where it did not or the attributes are absent)."""
    return int(getattr(layer, "intermediate_pad", 0) or 0), int(getattr(layer, "hidden_pad", 0) or 0)


def flag_layout(layer) -> str:
    """What SGLang's own flag says."""
    return SHUFFLE16 if getattr(getattr(layer, "w13_weight", None), "is_shuffled", False) else ROW_MAJOR


def processed_and_checked(core, layer, weight_format: str, process):
    """Run SGLang's processing (`process()`), then record on the runner core what its calls are read with: the
    layout (`core.weight_layout`, None: SGLang's flag decides) and SGLang's padding for AITER (`core.inter_pad`,
    `core.hidden_pad`, padding()); each finding is logged once per process for all the layers that share it (a
    model's layers do: one line, not one per layer). Returns process()'s result."""
    from ..runner import log_once

    loaded = snapshot(layer, weight_format)
    result = process()
    verdict = verify(layer, weight_format, loaded)
    flag = flag_layout(layer)
    core.weight_layout = verdict.layout
    lid = getattr(getattr(core, "config", None), "layer_id", None)
    where = f"layer {lid}" if lid is not None else "layer"
    once = "; said once for every layer with this finding"
    core.inter_pad, core.hidden_pad = padding(layer)
    if core.inter_pad:
        w13 = getattr(layer, "w13_weight", None)
        stored = int(w13.shape[1]) // 2 if isinstance(w13, torch.Tensor) and w13.dim() == 3 else 0
        log_once(("inter pad", weight_format, stored, core.inter_pad),
                 "sglang-smallm: %s: SGLang padded the intermediate size from %d to %d for AITER (zeros after gate, up "
                 "and w2's K); the kernel computes %d and does not read the padding%s", where, stored - core.inter_pad,
                 stored, stored - core.inter_pad, once)
    key = ("weight layout", weight_format, verdict.layout, flag, verdict.how)
    if verdict.layout is None:
        log_once(key, "sglang-smallm: %s weights read as %s (SGLang's is_shuffled flag): %s%s", where, flag,
                 verdict.how, once)
    elif verdict.layout.startswith(UNRECOGNISED):
        log_once(key, "sglang-smallm: %s: %s; every call of this layer goes to the fallback (the kernel reads "
                 "row-major or AITER's (16,16) shuffle only)%s", where, verdict.layout, once, level=logging.WARNING)
    elif verdict.layout != flag:
        log_once(key, "sglang-smallm: %s: SGLang's is_shuffled flag says %s but %s: the kernel reads them as %s%s",
                 where, flag, verdict.how, verdict.layout, once, level=logging.WARNING)
    else:
        log_once(key, "sglang-smallm: %s weights read as %s (%s)%s", where, verdict.layout, verdict.how, once)
    return result
