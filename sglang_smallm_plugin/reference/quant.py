"""Number formats: e4m3 FP8 with 128x128 block scales, MXFP4 (e2m1 + e8m0 per 32), MXFP8.

Conventions (OCP MX v1.0 and AITER):
- e8m0 byte b encodes 2^(b-127); 255 is NaN.
- fp4 e2m1 values are packed two per byte, element 2i in the low nibble, 2i+1 in the high.
- MX scales: one e8m0 per 32 consecutive values along the last dim. Weights (test data):
  2^(floor(log2(amax)) - emax_elem) with emax_elem = 2 (e2m1) or 8 (e4m3), values divided by
  it and rounded to nearest even, saturating at the format's max (6.0 / 448.0). MXFP8
  activations (what AITER's MoE consumes): the "RoundUp" scale of `mxfp8_scale_roundup`.
"""

import torch

from ._checks import require, require_tensor

FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
E4M3_MAX = 448.0


def e8m0_to_float(s: torch.Tensor) -> torch.Tensor:
    """e8m0 bytes (uint8 or float8_e8m0fnu) -> fp32 2^(b-127); 255 -> NaN."""
    require(s.element_size() == 1, f"e8m0 scales must be 1-byte, got {s.dtype}")
    b = s.contiguous().view(torch.uint8).to(torch.int32)
    out = torch.where(b == 0, torch.full_like(b, 0x00400000), b << 23).view(torch.float32)  # exact 2^(b-127)
    return torch.where(b == 255, torch.full_like(out, float("nan")), out)


def _float_to_e8m0_floor(amax: torch.Tensor, emax_elem: int) -> torch.Tensor:
    """Shared exponent per OCP MX: floor(log2(amax)) - emax_elem, biased by 127, clamped."""
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    e = torch.floor(torch.log2(safe)).to(torch.int32) - emax_elem
    e = torch.where(amax > 0, e, torch.full_like(e, -127))
    return (e + 127).clamp(0, 254).to(torch.uint8)


def fp4_unpack(packed: torch.Tensor) -> torch.Tensor:
    """[.., K/2] packed e2m1 bytes -> [.., K] fp32 values."""
    require(packed.element_size() == 1, f"packed fp4 must be 1-byte elements, got {packed.dtype}")
    b = packed.view(torch.uint8).to(torch.int64)
    lut = FP4_VALUES.to(packed.device)
    lo, hi = lut[b & 15], lut[b >> 4]
    return torch.stack([lo, hi], dim=-1).flatten(-2)


def _fp4_encode(v: torch.Tensor) -> torch.Tensor:
    """fp32 values (already scaled) -> e2m1 codes, round to nearest even, saturate at 6."""
    mags = FP4_VALUES[:8].to(v.device)
    a = v.abs().clamp(max=6.0)
    # nearest magnitude; ties go to the even code (code with lowest mantissa bit 0)
    d = (a.unsqueeze(-1) - mags).abs()
    best = d.min(dim=-1, keepdim=True).values
    cand = (d == best)
    codes = torch.arange(8, device=v.device)
    even_pref = cand & (codes % 2 == 0)
    pick = torch.where(even_pref.any(-1, keepdim=True), even_pref, cand)
    code = torch.argmax(pick.to(torch.int8), dim=-1)  # first (lowest) matching code
    sign = (v < 0) & (code > 0)
    return (code + 8 * sign.to(torch.int64)).to(torch.uint8)


def fp4_pack(codes: torch.Tensor) -> torch.Tensor:
    """[.., K] e2m1 codes (0..15) -> [.., K/2] bytes, low nibble first."""
    require(codes.shape[-1] % 2 == 0, "fp4_pack needs an even last dim")
    c = codes.to(torch.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).contiguous()


def mxfp4_quant(w: torch.Tensor):
    """fp32/bf16 [.., K] -> (packed uint8 [.., K/2], e8m0 uint8 [.., K/32])."""
    require_tensor(w, "w", dtypes=(torch.float32, torch.bfloat16, torch.float16))
    require(w.shape[-1] % 32 == 0, f"last dim must be a multiple of 32, got {w.shape[-1]}")
    g = w.float().reshape(*w.shape[:-1], -1, 32)
    scale = _float_to_e8m0_floor(g.abs().amax(-1), 2)
    codes = _fp4_encode(g / e8m0_to_float(scale).unsqueeze(-1))
    return fp4_pack(codes.reshape(w.shape)), scale


def dequant_mxfp4(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """packed [.., K/2] + e8m0 [.., K/32] (plain layout) -> fp32 [.., K]."""
    v = fp4_unpack(packed)
    require(scale.shape[-1] * 32 == v.shape[-1], f"scale [.., {scale.shape[-1]}] does not cover K={v.shape[-1]}")
    s = e8m0_to_float(scale).repeat_interleave(32, dim=-1)
    return v * s


def mxfp8_scale_roundup(amax: torch.Tensor) -> torch.Tensor:
    """The e8m0 scale AITER's MXFP8 MoE activations use ("RoundUp"): 2^ceil(log2(s)) with
    s = max(amax, 1e-10) / 448 in fp32 (IEEE division), so that every |x| / scale <= 448.
    Computed on the fp32 bits: the exponent field, plus one when the mantissa is not zero."""
    sf = torch.clamp(amax.float(), min=1e-10) / E4M3_MAX
    bits = sf.contiguous().view(torch.int32)
    e = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return e.to(torch.uint8)


def mxfp8_quant(x: torch.Tensor):
    """bf16/fp32 [.., K] -> (e4m3fn [.., K], e8m0 uint8 [.., K/32]): the activation quantisation
    AITER's MXFP8 MoE consumes. Scale per 32 values from `mxfp8_scale_roundup`; values x / scale
    (exact: a power of two) rounded to nearest even (never saturates: |x| / scale <= 448)."""
    require_tensor(x, "x", dtypes=(torch.float32, torch.bfloat16, torch.float16))
    require(x.shape[-1] % 32 == 0, f"last dim must be a multiple of 32, got {x.shape[-1]}")
    g = x.float().reshape(*x.shape[:-1], -1, 32)
    scale = mxfp8_scale_roundup(g.abs().amax(-1))
    q = (g / e8m0_to_float(scale).unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX)
    return q.reshape(x.shape).to(torch.float8_e4m3fn), scale


def mxfp8_dequant(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * e8m0_to_float(scale).repeat_interleave(32, dim=-1)


def quant_fp8_blockscale(w: torch.Tensor, block: int = 128):
    """fp32/bf16 [E, N, K] -> (e4m3fn [E, N, K], fp32 scale [E, N/128, K/128]); scale = amax/448."""
    require_tensor(w, "w", dtypes=(torch.float32, torch.bfloat16, torch.float16), dim=3)
    e, n, k = w.shape
    require(n % block == 0 and k % block == 0, f"N and K must be multiples of {block}, got {n}, {k}")
    g = w.float().reshape(e, n // block, block, k // block, block)
    amax = g.abs().amax(dim=(2, 4))
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    q = (g / scale[:, :, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).reshape(e, n, k)
    return q.to(torch.float8_e4m3fn), scale.contiguous()


def dequant_fp8_blockscale(w: torch.Tensor, scale: torch.Tensor, block: int = 128) -> torch.Tensor:
    """e4m3 [.., N, K] with fp32 scale [.., N/128, K/128] -> fp32 [.., N, K]."""
    require(w.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.uint8),
            f"fp8 weights must be float8_e4m3fn/fnuz (or raw uint8 bytes), got {w.dtype}")
    require_tensor(scale, "scale", dtypes=(torch.float32,))
    n, k = w.shape[-2], w.shape[-1]
    require(tuple(scale.shape[-2:]) == ((n + block - 1) // block, (k + block - 1) // block),
            f"block scale shape {tuple(scale.shape)} does not match weights {tuple(w.shape)} (block {block}); "
            "per-channel or per-tensor scales are not 128x128 block scales")
    wf = (w.view(torch.float8_e4m3fn) if w.dtype == torch.uint8 else w).float()
    s = scale.repeat_interleave(block, dim=-2)[..., :n, :].repeat_interleave(block, dim=-1)[..., :k]
    return wf * s



def _f16_stage_scale(rows: torch.Tensor) -> torch.Tensor:
    """Per row (fp32) 2^e, e = exponent(max |row|) - 14 clamped to >= -100: the row's max times 2^-e
    lies in [2^14, 2^15) (hip/smallm_moe_twopass.h f16_stage_exponent)."""
    bits = rows.abs().amax(dim=1).view(torch.int32)
    e = (((bits >> 23) & 0xFF) - 127 - 14).clamp(min=-100)
    return torch.pow(2.0, e.float())


def x_to_f16_per_token(x: torch.Tensor):
    """Model of the activations the tensor-core gate/up kernel (FP8 and MXFP4) stages (hip/smallm_moe_twopass.h):
    per token (row) e = exponent(max |x|) - 14, clamped to >= -100, so that max |x| * 2^-e lies in
    [2^14, 2^15); x * 2^-e rounded to f16. Returns (x16 [T, D] float16, scale [T] float32 = 2^e);
    x16 * scale reproduces x exactly wherever |x| >= 2^-28 max |x| (bf16 input)."""
    xf = x.float()
    scale = _f16_stage_scale(xf)
    return (xf / scale[:, None]).to(torch.float16), scale


def _h_hi_lo_per_pair(h: torch.Tensor, lo_dtype: torch.dtype):
    """h scaled per pair (row) by 2^-e (_f16_stage_scale, exact), hi = f16 of it, lo = the exact
    remainder rounded to lo_dtype. Returns (hi, lo, scale = 2^e)."""
    hf = h.float()
    scale = _f16_stage_scale(hf)
    v = hf / scale[:, None]
    hi = v.to(torch.float16)
    return hi, (v - hi.float()).to(lo_dtype), scale


def h_to_f16_hi_lo_per_pair(h: torch.Tensor):
    """Model of the intermediate the tensor-core down kernel (FP8 and MXFP4) stages (hip/smallm_moe_twopass.h):
    per pair (row of h, fp32) e = exponent(max |h|) - 14, clamped to >= -100, v = h * 2^-e (exact),
    hi = f16(v), lo = f16(v - hi). Returns (hi, lo [P, I] float16, scale [P] float32 = 2^e);
    (hi + lo) * scale is within 2^-22 |h| + 2^-25 scale of h (22 significant bits), no overflow."""
    return _h_hi_lo_per_pair(h, torch.float16)


def h_to_f16_hi_e5m2_lo_per_pair(h: torch.Tensor):
    """The same with the lo half as e5m2 (the tensor-core down's kLo8 kernels, where the f16 halves do not
    fit its block or, FP8, would pass the 196 KB carveout): hi = f16(v), lo = e5m2(v - hi), round to
    nearest even. Returns (hi [P, I] float16, lo [P, I] float8_e5m2, scale [P] float32 = 2^e);
    (hi + lo) * scale is within 2^-14 |h| + 2^-17 scale of h. e5m2 is the high byte of an f16, so the
    kernel widens lo exactly (lo.to(float16))."""
    return _h_hi_lo_per_pair(h, torch.float8_e5m2)


MXFP4_MMA_STEP = 128  # values of K per tensor-core step: 4 lanes x one 32-value block


def mxfp4_tensor_core_weights(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Model of the MXFP4 weights as the tensor-core gate/up, and the down where I takes four MMA
    chunks, use them (hip/smallm_moe_twopass.h; the down with two chunks, and the gate/up's jobs of
    one pair where D <= 4096 (lane scales), apply each block's scale exactly, as dequant_mxfp4),
    plain layout [.., K/2] + e8m0 [.., K/32] -> fp32 [.., K]. Per row and step of 128 values (four
    32-value blocks with scales s), R = the step's largest s; a value v 2^(s-127) is held as the f16
    v 2^(s-R+1) (round to nearest even: exact while R - s <= 24, f16 subnormals or zero beyond) and
    the step's sums take 2^(R-128) in fp32. Equal to dequant_mxfp4 while every step's scales lie
    within 2^24 of each other; otherwise within 2^-25 2^(R-128) of it per value."""
    require(packed.shape[-1] * 2 % MXFP4_MMA_STEP == 0, f"K must be a multiple of {MXFP4_MMA_STEP}")
    v = fp4_unpack(packed)
    s = scale.contiguous().view(torch.uint8).to(torch.int32)
    steps = s.reshape(*s.shape[:-1], -1, 4)
    r = steps.amax(dim=-1, keepdim=True)
    rel = torch.exp2((steps - r + 1).float())                       # 2^(s-R+1), exact in fp32
    held = (v.reshape(*steps.shape, 32) * rel.unsqueeze(-1)).to(torch.float16).float()
    outer = e8m0_to_float(r.to(torch.uint8)).unsqueeze(-1) * 0.5     # 2^(R-128); NaN for 255
    return (held * outer).reshape(v.shape)
