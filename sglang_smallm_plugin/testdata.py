"""Random MoE layers and routings for selftest, tests and benchmarks (fresh per seed)."""

import torch

from . import reference
from .calls import FP8_BLOCK128, MXFP4, SHUFFLE16, MoeCall
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
    if layout == SHUFFLE16:
        w13, w2 = reference.shuffle_weight(w13), reference.shuffle_weight(w2)
        if weight_format == MXFP4:
            s13 = reference.e8m0_shuffle(s13.reshape(E * 2 * I, -1)).view(E, 2 * I, -1)
            s2 = reference.e8m0_shuffle(s2.reshape(E * D, -1)).view(E, D, -1)
    return {"w13": w13, "w2": w2, "w13_scale": s13, "w2_scale": s2}


def pad_inter(weights: dict, weight_format: str, pad: int, fill: str = "poison") -> dict:
    """Row-major weights of intermediate size I as SGLang leaves a layer it padded for AITER (Quark MXFP4's
    layer.intermediate_pad): gate rows, `pad` rows, up rows, `pad` rows; w2 and the scales with `pad` more values
    along I. fill "zeros" is SGLang's; "poison" fills the padding with values that would show wherever a kernel
    read them (FP8 NaN e4m3 and NaN scales; MXFP4 +-6.0 values and e8m0 NaN scales)."""
    w13, w2, s13, s2 = (weights[k] for k in ("w13", "w2", "w13_scale", "w2_scale"))
    E, I2 = w13.shape[0], w13.shape[1]
    I = I2 // 2
    fp8 = weight_format == FP8_BLOCK128
    if fp8:
        wfill = 0 if fill == "zeros" else 0x7F  # e4m3fn NaN
        sfill = 0.0 if fill == "zeros" else float("nan")
    else:
        wfill = 0 if fill == "zeros" else 0x77  # two e2m1 6.0
        sfill = 0 if fill == "zeros" else 0xFF  # e8m0 NaN

    def rows(t, per, n):  # [E, 2 per, ...] -> [E, 2 (per + n), ...]
        g, u = t[:, :per], t[:, per:]
        f = torch.full((E, n) + tuple(t.shape[2:]), 0, dtype=t.dtype, device=t.device)
        f.view(torch.uint8).fill_(wfill) if t.element_size() == 1 else f.fill_(sfill)
        return torch.cat([g, f, u, f.clone()], dim=1).contiguous()

    def cols(t, n, v):
        f = torch.zeros(tuple(t.shape[:2]) + (n,), dtype=t.dtype, device=t.device)
        f.view(torch.uint8).fill_(v) if t.element_size() == 1 else f.fill_(v)
        return torch.cat([t, f], dim=2).contiguous()

    div = 1 if fp8 else 2
    out = {"w13": rows(w13, I, pad), "w2": cols(w2, pad // div, wfill)}
    if fp8:
        out["w13_scale"] = rows(s13, I // 128, pad // 128)
        out["w2_scale"] = cols(s2, pad // 128, sfill)
    else:
        f13 = torch.full((E, pad) + tuple(s13.shape[2:]), sfill, dtype=s13.dtype, device=s13.device)
        out["w13_scale"] = torch.cat([s13[:, :I], f13, s13[:, I:], f13], dim=1).contiguous()
        out["w2_scale"] = cols(s2, pad // 32, sfill)
    return out


def make_padded_weights(shape: MoeShape, weight_format: str, layout: str, seed: int, device, pad: int,
                        fill: str = "poison") -> dict:
    """make_weights' weights (the same values for the same seed) padded as pad_inter, then in `layout`."""
    w = pad_inter(make_weights(shape, weight_format, "row_major", seed, device), weight_format, pad, fill)
    if layout == SHUFFLE16:
        E, D = shape.experts, shape.hidden
        n13, n2 = w["w13"].shape[1], D
        w["w13"], w["w2"] = reference.shuffle_weight(w["w13"]), reference.shuffle_weight(w["w2"])
        if weight_format == MXFP4:
            w["w13_scale"] = reference.e8m0_shuffle(w["w13_scale"].reshape(E * n13, -1)).view(E, n13, -1)
            w["w2_scale"] = reference.e8m0_shuffle(w["w2_scale"].reshape(E * n2, -1)).view(E, n2, -1)
    return w


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
