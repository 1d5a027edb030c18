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
              shuffled=call.layout == SHUFFLE16, acc_dtype=acc_dtype, routed_scaling_factor=call.routed_scaling_factor)
