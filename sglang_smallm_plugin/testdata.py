"""Random MoE layers and routings for selftest, tests and benchmarks (fresh per seed)."""

from typing import Optional

import torch

from . import reference
from .calls import FP8_BLOCK128, MXFP4, ROW_MAJOR, SHUFFLE16, MoeCall
from .shapes import MoeShape


def make_weights(shape: MoeShape, weight_format: str, layout: str, seed: int, device) -> dict:
    """Random quantized expert weights in the given format and layout."""
    g = torch.Generator(device=device).manual_seed(seed)
    E, D, I = shape.experts, shape.hidden, shape.inter
    if weight_format == FP8_BLOCK128:
        w13 = torch.randn(E, 2 * I, D, device=device, generator=g).clamp(-8, 8).to(torch.float8_e4m3fn)
        w2 = torch.randn(E, D, I, device=device, generator=g).clamp(-8, 8).to(torch.float8_e4m3fn)
        s13 = torch.rand(E, 2 * I // 128, D // 128, device=device, generator=g) * 0.02 + 0.005
        s2 = torch.rand(E, D // 128, I // 128, device=device, generator=g) * 0.02 + 0.005
    elif weight_format == MXFP4:
        w13 = torch.randint(0, 256, (E, 2 * I, D // 2), dtype=torch.uint8, device=device, generator=g)
        w2 = torch.randint(0, 256, (E, D, I // 2), dtype=torch.uint8, device=device, generator=g)
        s13 = torch.randint(118, 124, (E, 2 * I, D // 32), dtype=torch.uint8, device=device, generator=g)
        s2 = torch.randint(118, 124, (E, D, I // 32), dtype=torch.uint8, device=device, generator=g)
    else:
        raise ValueError(f"unknown weight format {weight_format}")
    return in_layout({"w13": w13, "w2": w2, "w13_scale": s13, "w2_scale": s2}, weight_format, layout)


class UnsupportedLayout(ValueError):
    """Test weights of this shape cannot be laid out as asked (the reason says why and what to use)."""


def _untiled(name: str, experts: int, rows: int) -> Optional[str]:
    if experts * rows % 256 == 0:
        return None
    return (f"shuffle16x16 MXFP4 weights need experts x rows in multiples of 256 (AITER's e8m0_shuffle tiles); "
            f"{name} has {experts} x {rows} = {experts * rows} rows: use row_major for this shape")


def layout_refusal(shape: MoeShape, weight_format: str, layout: str, pad: int = 0) -> Optional[str]:
    """Why `shape`'s weights cannot be made in `layout` (None where they can): AITER's e8m0_shuffle works on
    [E*N, K/32] scale matrices of whole 256-row tiles, so shuffled MXFP4 needs E*N a multiple of 256 for
    w13 (N = 2I) and w2 (N = D); every Qwen3.5/MiniMax/Qwen3 layer has it, odd E with D an odd multiple of
    128 does not (AITER would pad the rows, and the layer's [E, N, K/32] scale tensor would not exist)."""
    if layout != SHUFFLE16 or weight_format != MXFP4:
        return None
    return (_untiled("w13_scale", shape.experts, 2 * (shape.inter + pad))
            or _untiled("w2_scale", shape.experts, shape.hidden))


def in_layout(weights: dict, weight_format: str, layout: str) -> dict:
    """Row-major weights in `layout`: shuffle16x16 is AITER's (16,16) shuffle of w13 and w2 and, for MXFP4,
    e8m0_shuffle of the scales over the flattened [E*N, K/32] matrices (FP8 block scales stay as they are).
    Raises UnsupportedLayout where the scales do not tile (layout_refusal)."""
    if layout != SHUFFLE16:
        return weights
    if weight_format == MXFP4:
        why = _untiled("w13_scale", *weights["w13_scale"].shape[:2]) or _untiled("w2_scale", *weights["w2_scale"].shape[:2])
        if why:
            raise UnsupportedLayout(why)
    out = {"w13": reference.shuffle_weight(weights["w13"]), "w2": reference.shuffle_weight(weights["w2"])}
    for k in ("w13_scale", "w2_scale"):
        t = weights[k]
        out[k] = reference.e8m0_shuffle(t.reshape(-1, t.shape[-1])).view(t.shape[0], t.shape[1], -1) \
            if weight_format == MXFP4 else t
    return out


def pad_inter(weights: dict, weight_format: str, pad: int, fill: str = "poison") -> dict:
    """Row-major weights of intermediate size I as SGLang leaves a layer it padded for AITER (Quark MXFP4's
    layer.intermediate_pad): gate rows, `pad` rows, up rows, `pad` rows; w2 and the scales with `pad` more values
    along I. fill "zeros" is SGLang's; "poison" fills the padding with values that would show wherever a kernel
    read them (FP8 NaN e4m3 and NaN scales; MXFP4 +-6.0 values and e8m0 NaN scales)."""
    fp8 = weight_format == FP8_BLOCK128
    zeros = fill == "zeros"
    wfill = 0 if zeros else (0x7F if fp8 else 0x77)  # e4m3fn NaN / two e2m1 6.0
    sfill = 0 if zeros else (float("nan") if fp8 else 0xFF)  # fp32 NaN / e8m0 NaN

    def filled(t, shape, v):  # t's dtype; 1-byte types filled by their bits
        f = torch.empty(shape, dtype=t.dtype, device=t.device)
        (f.view(torch.uint8) if t.element_size() == 1 else f).fill_(v)
        return f

    def rows(t, n, v):  # [E, 2 per, ...] -> [E, 2 (per + n), ...]: n rows after each half
        per = t.shape[1] // 2
        f = filled(t, (t.shape[0], n) + tuple(t.shape[2:]), v)
        return torch.cat([t[:, :per], f, t[:, per:], f], dim=1)

    def cols(t, n, v):  # [E, N, K] -> [E, N, K + n]
        return torch.cat([t, filled(t, tuple(t.shape[:2]) + (n,), v)], dim=2)

    rows_per_scale, cols_per_scale = (128, 128) if fp8 else (1, 32)
    return {"w13": rows(weights["w13"], pad, wfill), "w2": cols(weights["w2"], pad // (1 if fp8 else 2), wfill),
            "w13_scale": rows(weights["w13_scale"], pad // rows_per_scale, sfill),
            "w2_scale": cols(weights["w2_scale"], pad // cols_per_scale, sfill)}


def make_padded_weights(shape: MoeShape, weight_format: str, layout: str, seed: int, device, pad: int,
                        fill: str = "poison") -> dict:
    """make_weights' weights (the same values for the same seed) padded as pad_inter, then in `layout`."""
    w = pad_inter(make_weights(shape, weight_format, ROW_MAJOR, seed, device), weight_format, pad, fill)
    return in_layout(w, weight_format, layout)


def make_routing(shape: MoeShape, tokens: int, seed: int, device, skew: float = 0.0):
    """Softmax top-k over routed experts plus the fused shared experts (weight 1.0)."""
    g = torch.Generator(device=device).manual_seed(seed + 7919)
    routed = shape.experts - shape.shared
    k = shape.slots - shape.shared
    logits = torch.randn(tokens, routed, device=device, generator=g)
    if skew:
        logits[:, :k] += skew  # concentrate on few experts
    w, ids = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
    if shape.shared:
        sid = torch.arange(routed, shape.experts, device=device).expand(tokens, shape.shared)
        ids = torch.cat([ids, sid], dim=1)
        w = torch.cat([w, torch.ones(tokens, shape.shared, device=device)], dim=1)
    return w.float().contiguous(), ids.to(torch.int32).contiguous()


def make_call(shape: MoeShape, weight_format: str, layout: str, tokens: int, seed: int, device,
              weights: dict = None) -> MoeCall:
    weights = weights or make_weights(shape, weight_format, layout, seed, device)
    g = torch.Generator(device=device).manual_seed(seed + 104729)
    x = (torch.randn(tokens, shape.hidden, device=device, generator=g)).to(torch.bfloat16)
    tw, ti = make_routing(shape, tokens, seed, device)
    return MoeCall(x=x, topk_weights=tw, topk_ids=ti, weight_format=weight_format, layout=layout, **weights)


def reference_of(call: MoeCall, acc_dtype=torch.float32) -> torch.Tensor:
    fn = reference.fused_moe_fp8_blockscale if call.weight_format == FP8_BLOCK128 else reference.fused_moe_mxfp4
    return fn(call.x, call.w13, call.w2, call.w13_scale, call.w2_scale, call.topk_weights, call.topk_ids,
              shuffled=call.layout == SHUFFLE16, acc_dtype=acc_dtype, routed_scaling_factor=call.routed_scaling_factor,
              inter=call.inter)
