"""Reference fused MoE: dequantize, SiLU(gate) * up, down projection, weighted sum over slots.

Computed in fp32 (fp64 optional), bf16 out. Weights may be row-major or AITER-shuffled
(`shuffled=True`); MXFP4 scales are plain [E, N, K/32] or, with shuffled weights, in AITER's
e8m0_shuffle layout. Slots whose expert id is outside [0, E) contribute nothing (expert
parallelism marks non-local experts with -1); a token with no valid slot outputs zeros.
"""

import torch

from ._checks import require, require_tensor
from .layouts import e8m0_unshuffle, unshuffle_weight
from .quant import dequant_fp8_blockscale, dequant_mxfp4


def _check_inter(inter, stored):
    require(inter is None or 0 < inter <= stored, f"inter {inter} is not in (0, {stored}] (the weights' intermediate size)")


def _check_routing(x, topk_weights, topk_ids):
    require_tensor(x, "x", dtypes=(torch.bfloat16, torch.float16, torch.float32), dim=2)
    require_tensor(topk_ids, "topk_ids", dtypes=(torch.int32, torch.int64), dim=2)
    require_tensor(topk_weights, "topk_weights", dtypes=(torch.float32, torch.bfloat16, torch.float16), dim=2)
    require(topk_ids.shape == topk_weights.shape, f"topk_ids {tuple(topk_ids.shape)} != topk_weights {tuple(topk_weights.shape)}")
    require(topk_ids.shape[0] == x.shape[0], f"topk rows {topk_ids.shape[0]} != tokens {x.shape[0]}")


def num_experts_of(deq) -> int:
    return deq.num_experts


class _Dequant:
    """Per-expert dequantizer that knows how many experts exist."""

    def __init__(self, fn, num_experts):
        self.fn, self.num_experts = fn, num_experts

    def __call__(self, e):
        return self.fn(e)


def _moe_from_dequant(x, deq13, deq2, topk_weights, topk_ids, acc_dtype, routed_scaling_factor, inter=None):
    """deq13(e) -> [2Iw, D] and deq2(e) -> [D, Iw] in acc_dtype; the first `inter` (default Iw) rows of each of
    gate and up and columns of w2 are used, the rest (SGLang's padding for AITER) never."""
    T, K = topk_ids.shape
    out = torch.zeros(T, x.shape[1], dtype=acc_dtype, device=x.device)
    xa = x.to(acc_dtype)
    ids = topk_ids.long()
    num_experts = num_experts_of(deq13)
    for e in torch.unique(ids).tolist():
        if e < 0 or e >= num_experts:
            continue
        rows, slots = (ids == e).nonzero(as_tuple=True)
        w13, w2 = deq13(e).to(acc_dtype), deq2(e).to(acc_dtype)
        iw = w13.shape[0] // 2
        i = iw if inter is None else inter
        gu = xa[rows] @ torch.cat([w13[:i], w13[iw:iw + i]]).t()
        h = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]
        y = h @ w2[:, :i].t()
        out.index_add_(0, rows, y * topk_weights[rows, slots].to(acc_dtype)[:, None])
    if routed_scaling_factor is not None:
        out = out * routed_scaling_factor
    return out.to(torch.bfloat16)


def fused_moe_fp8_blockscale(x, w13, w2, w13_scale, w2_scale, topk_weights, topk_ids, *, shuffled=False,
                             acc_dtype=torch.float32, routed_scaling_factor=None, inter=None):
    """FP8 e4m3 weights w13 [E, 2I, D], w2 [E, D, I] with fp32 128x128 block scales
    w13_scale [E, 2I/128, D/128], w2_scale [E, D/128, I/128]. Returns bf16 [T, D]. `inter` < I: the weights
    are padded (SGLang for AITER); gate rows [0, inter), up rows [I, I + inter) and w2's first inter columns."""
    _check_routing(x, topk_weights, topk_ids)
    require_tensor(w13, "w13", dim=3)
    require_tensor(w2, "w2", dim=3)
    E, N2, D = w13.shape
    require(x.shape[1] == D, f"x hidden {x.shape[1]} != w13 K {D}")
    require(w2.shape[0] == E and w2.shape[1] == D and w2.shape[2] * 2 == N2,
            f"w2 {tuple(w2.shape)} does not match w13 {tuple(w13.shape)}")
    _check_inter(inter, N2 // 2)
    un = unshuffle_weight if shuffled else (lambda t: t)
    return _moe_from_dequant(
        x,
        _Dequant(lambda e: dequant_fp8_blockscale(un(w13[e]), w13_scale[e]), E),
        _Dequant(lambda e: dequant_fp8_blockscale(un(w2[e]), w2_scale[e]), E),
        topk_weights, topk_ids, acc_dtype, routed_scaling_factor, inter)


def fused_moe_mxfp4(x, w13, w2, w13_scale, w2_scale, topk_weights, topk_ids, *, shuffled=False,
                    acc_dtype=torch.float32, routed_scaling_factor=None, inter=None):
    """MXFP4 weights: packed e2m1 w13 [E, 2I, D/2], w2 [E, D, I/2] (uint8), e8m0 scales
    [E, 2I, D/32] and [E, D, I/32] (plain), or with shuffled=True the AITER-shuffled weights and
    e8m0_shuffle'd scales of the flattened [E*N, K/32] matrices. bf16 activations, bf16 out. `inter` as in
    fused_moe_fp8_blockscale."""
    _check_routing(x, topk_weights, topk_ids)
    require_tensor(w13, "w13", dim=3)
    require_tensor(w2, "w2", dim=3)
    require(w13.element_size() == 1 and w2.element_size() == 1, "MXFP4 weights must be packed bytes")
    E, N2, Dh = w13.shape
    D, I = Dh * 2, N2 // 2
    require(x.shape[1] == D, f"x hidden {x.shape[1]} != 2 * w13 packed K {Dh}")
    require(tuple(w2.shape) == (E, D, I // 2), f"w2 {tuple(w2.shape)} != {(E, D, I // 2)}")
    if shuffled:
        s13 = e8m0_unshuffle(w13_scale.reshape(-1, w13_scale.shape[-1]), E * N2, D // 32).view(E, N2, D // 32)
        s2 = e8m0_unshuffle(w2_scale.reshape(-1, w2_scale.shape[-1]), E * D, I // 32).view(E, D, I // 32)
        un = unshuffle_weight
    else:
        s13, s2, un = w13_scale, w2_scale, (lambda t: t)
    require(tuple(s13.shape) == (E, N2, D // 32), f"w13 scale {tuple(s13.shape)} != {(E, N2, D // 32)}")
    require(tuple(s2.shape) == (E, D, I // 32), f"w2 scale {tuple(s2.shape)} != {(E, D, I // 32)}")
    _check_inter(inter, I)
    return _moe_from_dequant(
        x,
        _Dequant(lambda e: dequant_mxfp4(un(w13[e]), s13[e]), E),
        _Dequant(lambda e: dequant_mxfp4(un(w2[e]), s2[e]), E),
        topk_weights, topk_ids, acc_dtype, routed_scaling_factor, inter)
