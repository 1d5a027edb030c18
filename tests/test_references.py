"""The references are the specification: check them against hand-worked examples and against
independent straightforward loops, on fresh random inputs over several seeds."""

import pytest
import torch

from moe_loop import loop_moe
from sglang_smallm_plugin import reference as R
from sglang_smallm_plugin.tolerances import TOLERANCES, rel_l2

SEEDS = range(5)


# ----------------------------------------------------------------- layouts
def test_shuffle_weight_hand_example():
    # 16 rows x 32 bytes, byte = row * 32 + col (mod 256): one tile.
    w = (torch.arange(16 * 32) % 256).to(torch.uint8).view(16, 32)
    s = R.shuffle_weight(w).reshape(-1)
    # order inside the tile: [vector along K][row][16 bytes]
    assert s[:16].tolist() == list(range(0, 16))              # row 0, cols 0..15
    assert s[16:32].tolist() == list(range(32, 48))           # row 1, cols 0..15
    assert s[256:272].tolist() == list(range(16, 32))         # row 0, cols 16..31
    assert s[511] == (15 * 32 + 31) % 256                     # row 15, col 31 last


def test_shuffle_weight_tile_order():
    # 32 rows x 64 bytes: tiles in (row-tile, k-tile) row-major order
    w = torch.zeros(32, 64, dtype=torch.uint8)
    for rt in range(2):
        for kt in range(2):
            w[rt * 16:(rt + 1) * 16, kt * 32:(kt + 1) * 32] = rt * 2 + kt
    s = R.shuffle_weight(w).reshape(4, 512)
    assert [int(s[i].unique().item()) for i in range(4)] == [0, 1, 2, 3]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float8_e4m3fn, torch.bfloat16])
def test_shuffle_roundtrip(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(0, 256, (3, 64, 128), generator=g, dtype=torch.uint8)
    if dtype == torch.bfloat16:
        w = torch.randn(3, 64, 128, generator=g).to(torch.bfloat16)
    else:
        w = w.view(dtype)
    s = R.shuffle_weight(w)
    assert s.shape == w.shape and s.dtype == w.dtype
    assert not torch.equal(s.view(torch.uint8), w.view(torch.uint8))
    assert torch.equal(R.unshuffle_weight(s).view(torch.uint8), w.view(torch.uint8))


def test_e8m0_shuffle_hand_example():
    sc = (torch.arange(256 * 8) % 251).to(torch.uint8).view(256, 8)
    s = R.e8m0_shuffle(sc).reshape(-1)
    # flat index of (row R, col c) = ((((R/32 * C/8 + c/8) * 4 + c%4) * 16 + R%16) * 2 + (c/4)%2) * 2 + (R/16)%2
    def idx(r, c):
        return ((((r // 32 * 1 + c // 8) * 4 + c % 4) * 16 + r % 16) * 2 + (c // 4) % 2) * 2 + (r // 16) % 2
    for r, c in [(0, 0), (1, 0), (16, 0), (0, 1), (0, 4), (37, 5), (255, 7)]:
        assert int(s[idx(r, c)]) == int(sc[r, c])


@pytest.mark.parametrize("rows,cols", [(256, 8), (512, 4), (300, 12)])
def test_e8m0_shuffle_roundtrip_and_padding(rows, cols):
    sc = torch.randint(0, 255, (rows, cols), dtype=torch.uint8)
    s = R.e8m0_shuffle(sc)
    assert s.shape == ((rows + 255) // 256 * 256, (cols + 7) // 8 * 8)
    assert torch.equal(R.e8m0_unshuffle(s, rows, cols), sc)


# ----------------------------------------------------------------- sorting
def _routing(T, E, K, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)
    w = torch.rand(T, K, generator=g)
    return ids, w


def _loop_sort(ids, w, E, block):
    """Independent straightforward AITER-format sort."""
    T, K = ids.shape
    out_ids, out_w, blocks = [], [], []
    for e in range(E):
        pairs = [(t, k) for t in range(T) for k in range(K) if int(ids[t, k]) == e]
        if not pairs:
            continue
        for t, k in pairs:
            out_ids.append((k << 24) | t)
            out_w.append(float(w[t, k]))
        while len(out_ids) % block:
            out_ids.append((K << 24) | T)
            out_w.append(0.0)
        blocks += [e] * ((len(out_ids) - len(blocks) * block) // block)
    return out_ids, out_w, blocks


@pytest.mark.parametrize("E,K,T,block", [(513, 11, 1, 32), (513, 11, 7, 32), (513, 11, 24, 64),
                                         (129, 5, 13, 32), (129, 5, 51, 16), (8, 2, 5, 4)])
@pytest.mark.parametrize("seed", SEEDS)
def test_moe_sorting_matches_loop(E, K, T, block, seed):
    ids, w = _routing(T, E, K, seed)
    sid, sw, eids, nv = R.moe_sorting(ids, w, E, block)
    exp_ids, exp_w, exp_blocks = _loop_sort(ids, w, E, block)
    n = len(exp_ids)
    assert nv.tolist() == [n, T]
    assert sid.numel() == T * K + E * block - K
    assert sid[:n].tolist() == exp_ids
    assert torch.allclose(sw[:n], torch.tensor(exp_w), atol=0, rtol=0)
    assert eids[:n // block].tolist() == exp_blocks
    # properties: every pair exactly once, padded runs, ascending experts
    real = sid[:n][sid[:n] != ((K << 24) | T)]
    assert real.numel() == T * K
    assert len(set(real.tolist())) == T * K
    assert eids[:n // block].tolist() == sorted(eids[:n // block].tolist())


@pytest.mark.parametrize("seed", SEEDS)
def test_moe_sorting_all_pairs_one_expert(seed):
    T, K, E, block = 9, 1, 129, 8
    ids = torch.full((T, K), 77, dtype=torch.int32)
    w = torch.rand(T, K, generator=torch.Generator().manual_seed(seed))
    sid, sw, eids, nv = R.moe_sorting(ids, w, E, block)
    assert nv.tolist() == [16, T]
    assert sid[:T].tolist() == list(range(T))
    assert sid[T:16].tolist() == [(K << 24) | T] * (16 - T)
    assert eids[:2].tolist() == [77, 77]
    assert torch.equal(sw[T:16], torch.zeros(16 - T))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("E,K,T,block", [(513, 11, 5, 16), (129, 5, 20, 32)])
def test_moe_align_block_size_properties(seed, E, K, T, block):
    ids, _ = _routing(T, E, K, seed)
    sid, eids, npad = R.moe_align_block_size(ids, E, block)
    n = int(npad)
    counts = torch.bincount(ids.reshape(-1).long(), minlength=E)
    assert n == int(((counts + block - 1) // block * block).sum())
    flat = ids.reshape(-1)
    for b in range(n // block):
        chunk = sid[b * block:(b + 1) * block]
        real = chunk[chunk < ids.numel()]
        assert bool((flat[real.long()] == eids[b]).all())
    real = sid[:n][sid[:n] < ids.numel()]
    assert sorted(real.tolist()) == list(range(ids.numel()))
    assert bool((sid[n:] == ids.numel()).all())


def test_invalid_ids_dropped_in_aiter_format_and_leading_bucket_in_triton_format():
    # token 0 -> experts 2, -1; token 1 -> 9 (>= E), 2; token 2 -> 0, 2
    ids = torch.tensor([[2, -1], [9, 2], [0, 2]], dtype=torch.int32)
    w = torch.tensor([[0.5, 0.25], [0.125, 1.0], [2.0, 4.0]])
    sid, sw, eids, nv = R.moe_sorting(ids, w, 4, 4)
    pad = (2 << 24) | 3
    assert nv.tolist() == [8, 3]
    assert sid[:8].tolist() == [(0 << 24) | 2, pad, pad, pad, (0 << 24) | 0, (1 << 24) | 1, (1 << 24) | 2, pad]
    assert sw[:8].tolist() == [2.0, 0, 0, 0, 0.5, 1.0, 4.0, 0]
    assert eids[:2].tolist() == [0, 2]
    tid, teids, tn = R.moe_align_block_size(ids, 4, 4)
    # bucket "-1" (pairs 1 and 2) first, then expert 0 (pair 4), then expert 2 (pairs 0, 3, 5)
    assert int(tn) == 12
    assert tid[:12].tolist() == [1, 2, 6, 6, 4, 6, 6, 6, 0, 3, 5, 6]
    assert teids[:3].tolist() == [-1, 0, 2]


def test_sorted_mxfp8_scales_hand_example():
    # 2 tokens, D = 64 (2 groups, padded to 8 columns); one expert, block 32: rows 0, 1 real.
    scales = torch.tensor([[10, 11], [20, 21]], dtype=torch.uint8)
    ids = torch.tensor([[3], [3]], dtype=torch.int32)
    sid, _, _, nv = R.moe_sorting(ids, torch.ones(2, 1), 5, 32)
    xs = R.sorted_mxfp8_scales(scales, sid, nv, 2).reshape(-1)
    assert xs.numel() == (2 + 5 * 32 - 1 + 31) // 32 * 32 * 8
    # tile byte offset of (row r, col j): (j % 4) * 64 + (r % 16) * 4 + ((j // 4) % 2) * 2 + (r // 16) % 2
    assert xs[0] == 10 and xs[64] == 11 and xs[4] == 20 and xs[68] == 21
    assert int((xs[:256] != 0).sum()) == 4  # padding rows and columns are zero
    assert bool((xs[256:] == 0xAA).all())  # past the padded length: outside the contract


@pytest.mark.parametrize("seed", SEEDS)
def test_mxfp8_roundup_scale_bounds_every_value(seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(8, 512, generator=g) * torch.logspace(-6, 6, 8).unsqueeze(1)).to(torch.bfloat16)
    x[0, :32] = 0
    q, s = R.mxfp8_quant(x)
    grp = x.float().reshape(8, -1, 32).abs().amax(-1)
    scale = R.e8m0_to_float(s)
    assert bool((grp / scale <= 448).all())
    assert bool((grp / scale > 224).all() | (grp == 0).any())  # the smallest power of two that fits
    assert int(s[0, 0]) == int(R.mxfp8_scale_roundup(torch.tensor([1e-10]))[0])
    assert not torch.isnan(q.float()).any()


# ----------------------------------------------------------------- quantization
@pytest.mark.parametrize("seed", SEEDS)
def test_quant_roundtrips(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 256, generator=g)
    q, s = R.mxfp8_quant(x)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.uint8 and s.shape == (16, 8)
    assert rel_l2(R.mxfp8_dequant(q, s), x) < TOLERANCES["mxfp8_roundtrip"]
    p, s4 = R.mxfp4_quant(x)
    assert p.shape == (16, 128) and s4.shape == (16, 8)
    assert rel_l2(R.dequant_mxfp4(p, s4), x) < TOLERANCES["mxfp4_roundtrip"]
    w = torch.randn(2, 256, 384, generator=g)
    q8, s8 = R.quant_fp8_blockscale(w)
    assert s8.shape == (2, 2, 3)
    assert rel_l2(R.dequant_fp8_blockscale(q8, s8), w) < TOLERANCES["fp8_block_roundtrip"]


def test_fp4_exact_values_and_packing():
    vals = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0, 0.0] * 2)
    p, s = R.mxfp4_quant(vals.view(1, 32))
    assert int(s) == 127  # amax 6 -> 2^(2-2) = 1
    assert torch.equal(R.dequant_mxfp4(p, s).view(-1), vals)
    assert int(p[0, 0]) == (1 << 4) | 0  # element 0 low nibble, element 1 high nibble


def test_e8m0_decode():
    assert R.e8m0_to_float(torch.tensor([127, 128, 120], dtype=torch.uint8)).tolist() == [1.0, 2.0, 2.0 ** -7]
    assert torch.isnan(R.e8m0_to_float(torch.tensor([255], dtype=torch.uint8)))[0]


# ----------------------------------------------------------------- MoE
def _layer(fmt, seed, E=6, D=256, I=128):
    from sglang_smallm_plugin.shapes import MoeShape
    from sglang_smallm_plugin.testdata import make_weights

    shape = MoeShape("t", D, E, 3, I, 1)
    return shape, make_weights(shape, fmt, "row_major", seed, "cpu")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fmt", ["fp8_block128", "mxfp4"])
def test_moe_reference_vs_loop(seed, fmt):
    from sglang_smallm_plugin.testdata import make_call, reference_of

    shape, w = _layer(fmt, seed)
    call = make_call(shape, fmt, "row_major", 4, seed, "cpu", w)
    call.topk_ids[1, 0] = -1  # an expert-parallel "not here" slot contributes nothing
    loop = loop_moe(call)
    ref = reference_of(call, acc_dtype=torch.float64)
    assert ref.dtype == torch.bfloat16
    assert rel_l2(ref.float(), loop.to(torch.bfloat16).float()) < TOLERANCES["reference_vs_loop"]
    ref32 = reference_of(call)
    assert rel_l2(ref32.float(), loop.float()) < TOLERANCES["reference_fp32_vs_fp64"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fmt", ["fp8_block128", "mxfp4"])
def test_moe_reference_shuffled_equals_row_major(seed, fmt):
    from sglang_smallm_plugin.shapes import MoeShape
    from sglang_smallm_plugin.testdata import make_call, reference_of

    shape = MoeShape("t", 256, 8, 3, 128, 1)
    a = make_call(shape, fmt, "row_major", 5, seed, "cpu")
    b = make_call(shape, fmt, "shuffle16x16", 5, seed, "cpu")
    assert not torch.equal(a.w13.view(torch.uint8), b.w13.view(torch.uint8))
    assert torch.equal(reference_of(a), reference_of(b))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("fmt", ["fp8_block128", "mxfp4"])
@pytest.mark.parametrize("layout", ["row_major", "shuffle16x16"])
def test_moe_reference_padded_inter_reads_only_the_computed_part(seed, fmt, layout):
    """SGLang's padding for AITER (layer.intermediate_pad): with inter_pad the reference computes I and never reads
    the padding: poisoned padding gives the unpadded layer's output bit for bit; read whole, the poison shows."""
    import dataclasses

    from sglang_smallm_plugin.shapes import MoeShape
    from sglang_smallm_plugin.testdata import make_call, make_padded_weights, reference_of

    shape = MoeShape("t", 256, 8, 3, 128, 1)
    plain = make_call(shape, fmt, layout, 5, seed, "cpu")
    w = make_padded_weights(shape, fmt, layout, seed, "cpu", pad=128)
    padded = dataclasses.replace(plain, **w, inter_pad=128)
    assert (padded.inter, padded.inter_stored, plain.inter) == (128, 256, 128)
    want = reference_of(plain)
    assert torch.equal(reference_of(padded), want)
    if layout == "row_major":
        assert rel_l2(reference_of(padded).float(), loop_moe(padded).float()) < TOLERANCES["reference_fp32_vs_fp64"]
    whole = dataclasses.replace(padded, inter_pad=0)
    assert not torch.isfinite(reference_of(whole).float()).all() or fmt == "mxfp4"
    assert not torch.equal(reference_of(whole), want)  # the poison is there to be read
    zeros = dataclasses.replace(plain, **make_padded_weights(shape, fmt, layout, seed, "cpu", pad=128, fill="zeros"))
    assert rel_l2(reference_of(zeros).float(), want.float()) < TOLERANCES["reference_fp32_vs_fp64"]  # SGLang's zeros


def test_moe_reference_token_without_valid_slot_is_zero():
    from sglang_smallm_plugin.testdata import make_call, reference_of

    shape, w = _layer("fp8_block128", 0)
    call = make_call(shape, "fp8_block128", "row_major", 3, 0, "cpu", w)
    call.topk_ids[2] = -1
    out = reference_of(call)
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    assert out[0].abs().sum() > 0


# ----------------------------------------------------------------- bad input
def test_bad_inputs_raise_clear_errors():
    w = torch.zeros(2, 16, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match="multiple of 16"):
        R.shuffle_weight(torch.zeros(2, 8, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="layout"):
        R.shuffle_weight(w, layout=(32, 16))
    with pytest.raises(ValueError, match="1- and 2-byte"):
        R.shuffle_weight(torch.zeros(16, 32))
    ids = torch.zeros(2, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match="dtype"):
        R.moe_sorting(ids, torch.zeros(2, 2), 4, 4)
    with pytest.raises(ValueError, match="block_size % 32"):
        R.moe_sorting_mxfp8(torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, 1), torch.ones(1, 32), 4, 16)
    with pytest.raises(ValueError, match="per-channel"):
        R.dequant_fp8_blockscale(torch.zeros(256, 256, dtype=torch.float8_e4m3fn), torch.ones(256, 1))
    x = torch.zeros(3, 256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="topk"):
        R.fused_moe_fp8_blockscale(x, torch.zeros(2, 256, 256, dtype=torch.float8_e4m3fn),
                                   torch.zeros(2, 256, 128, dtype=torch.float8_e4m3fn), torch.ones(2, 2, 2),
                                   torch.ones(2, 2, 1), torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="contiguous"):
        from sglang_smallm_plugin.reference._checks import require_tensor

        require_tensor(torch.zeros(4, 4).t(), "x", contiguous=True)
    with pytest.raises(ValueError, match="multiple of 32"):
        R.mxfp8_quant(torch.zeros(2, 48))


# ----------------------------------------------------------------- x staged as f16 (tensor-core gate/up)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("magnitude", [2.0 ** -60, 2.0 ** -20, 1.0, 2.0 ** 14, 2.0 ** 40, 2.0 ** 100])
def test_x_to_f16_per_token_is_exact_above_2m28_of_the_max(seed, magnitude):
    """What the tensor-core gate/up (FP8 and MXFP4) stages instead of bf16 x: scaled per token by a power of two
    so that no value overflows f16 and every value within 2^28 of the token's largest is exact."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(4, 4096, generator=g) * magnitude)
    x[0, 5] *= 1e4  # an outlier in one token
    x[1, :] = 0.0   # an all-zero token
    x = x.to(torch.bfloat16)
    x16, scale = R.x_to_f16_per_token(x)
    assert bool(x16.isfinite().all())
    back = x16.float() * scale[:, None]
    xf = x.float()
    amax = xf.abs().amax(dim=1, keepdim=True)
    big = xf.abs() >= amax * 2.0 ** -28
    assert torch.equal(back[big], xf[big])
    # below that, f16 subnormals: absolute error at most half the smallest subnormal step, scaled
    assert bool(((back - xf).abs() <= 2.0 ** -25 * scale[:, None]).all())
    scaled_max = (xf.abs().amax(dim=1) / scale)
    live = amax[:, 0] > 0
    assert bool(((scaled_max[live] >= 2.0 ** 14) & (scaled_max[live] < 2.0 ** 15)).all())


# ----------------------------------------------------------------- h staged as two f16 halves (tensor-core down)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("magnitude", [2.0 ** -60, 2.0 ** -20, 1.0, 2.0 ** 14, 2.0 ** 40, 2.0 ** 100])
def test_h_to_f16_hi_lo_per_pair_keeps_22_bits(seed, magnitude):
    """What the tensor-core down kernel (FP8 and MXFP4) stages instead of fp32 h: hi + lo f16 halves of h scaled
    per pair by a power of two; no overflow, and 22 significant bits of every value."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(6, 256, generator=g) * magnitude
    h[0, 7] *= 1e5   # an outlier in one pair
    h[1, :] = 0.0    # an all-zero pair
    h[2, 3] = -h[2].abs().max() * 3  # a negative maximum
    hi, lo, scale = R.h_to_f16_hi_lo_per_pair(h)
    assert bool(hi.isfinite().all()) and bool(lo.isfinite().all())
    back = (hi.float() + lo.float()) * scale[:, None]
    err = (back - h).abs()
    assert bool((err <= h.abs() * 2.0 ** -22 + 2.0 ** -25 * scale[:, None]).all())
    # a single f16 (hi alone) would not be enough: its error reaches 2^-12 of some values
    one = (hi.float() * scale[:, None] - h).abs()
    assert bool((one > h.abs() * 2.0 ** -16).any())
    scaled_max = h.abs().amax(dim=1) / scale
    live = scaled_max > 0
    assert bool(((scaled_max[live] >= 2.0 ** 14) & (scaled_max[live] < 2.0 ** 15)).all())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("magnitude", [2.0 ** -60, 2.0 ** -20, 1.0, 2.0 ** 14, 2.0 ** 40, 2.0 ** 100])
def test_h_to_f16_hi_e5m2_lo_per_pair_keeps_14_bits(seed, magnitude):
    """kLo8's stage: hi f16, lo e5m2 (3 bytes a value); within 2^-14 |h| + 2^-17 scale, finite, the lo
    byte widened to f16 exactly, and coarser than the f16 halves (so the choice matters)."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(6, 256, generator=g) * magnitude
    h[0, 7] *= 1e5
    h[1, :] = 0.0
    h[2, 3] = -h[2].abs().max() * 3
    hi, lo, scale = R.h_to_f16_hi_e5m2_lo_per_pair(h)
    assert lo.dtype == torch.float8_e5m2 and bool(hi.isfinite().all()) and bool(lo.float().isfinite().all())
    # e5m2 byte b is the f16 with bits b << 8 (what the kernel's byte permute builds)
    widened = (lo.view(torch.uint8).to(torch.int16) << 8).view(torch.float16)
    assert torch.equal(widened.float(), lo.float())
    back = (hi.float() + lo.float()) * scale[:, None]
    assert bool(((back - h).abs() <= h.abs() * 2.0 ** -14 + 2.0 ** -17 * scale[:, None]).all())
    hi16, lo16, _ = R.h_to_f16_hi_lo_per_pair(h)
    assert torch.equal(hi, hi16)
    f16_err = ((hi16.float() + lo16.float()) * scale[:, None] - h).abs()
    assert bool(((back - h).abs() > f16_err).any())


# ----------------------------------------------------------------- MXFP4 weights on tensor cores
def _fp4_step_scales(g, rows, steps, spread):
    base = torch.randint(spread + 2, 250, (rows, steps, 1), generator=g)
    return (base - torch.randint(0, spread + 1, (rows, steps, 4), generator=g)).reshape(rows, 4 * steps).to(torch.uint8)


@pytest.mark.parametrize("seed", SEEDS)
def test_mxfp4_tensor_core_weights_exact_within_2p24(seed):
    """The tensor-core MXFP4 path holds each value in f16 relative to the largest scale of its 128-value
    step: exact while the step's four scales lie within 2^24 of each other (every e2m1 code)."""
    g = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (16, 256), dtype=torch.uint8, generator=g)  # K = 512: 4 steps
    scale = _fp4_step_scales(g, 16, 4, 24)
    assert torch.equal(R.mxfp4_tensor_core_weights(packed, scale), R.dequant_mxfp4(packed, scale))


@pytest.mark.parametrize("seed", SEEDS)
def test_mxfp4_tensor_core_weights_beyond_2p24_rounds_only_small_blocks(seed):
    """Scales up to 2^40 apart: blocks within 2^24 of their step's largest stay exact; smaller ones
    become f16 subnormals or zero, off by at most 2^-25 2^(R-128) per value (R: the step's largest)."""
    g = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (16, 256), dtype=torch.uint8, generator=g)
    scale = _fp4_step_scales(g, 16, 4, 40)
    tc, exact = R.mxfp4_tensor_core_weights(packed, scale), R.dequant_mxfp4(packed, scale)
    s = scale.to(torch.int32).reshape(16, 4, 4)
    r = s.amax(dim=-1, keepdim=True)
    near = ((r - s) <= 24).repeat_interleave(32, dim=-1).reshape(16, 512)
    assert torch.equal(tc[near], exact[near])
    bound = torch.exp2((r - 128).float() - 25).expand(16, 4, 4).repeat_interleave(32, dim=-1).reshape(16, 512)
    assert bool(((tc - exact).abs() <= bound).all())
    assert not torch.equal(tc, exact)  # the far blocks do lose bits


def test_mxfp4_tensor_core_weights_nan_scale():
    packed = torch.full((1, 64), 0x22, dtype=torch.uint8)
    scale = torch.tensor([[127, 255, 127, 127]], dtype=torch.uint8)
    assert bool(R.mxfp4_tensor_core_weights(packed, scale).isnan().all())  # 255 is NaN for the whole step


def test_e2m1_to_f16_bit_formula():
    """The decode of hip/smallm_compat.h e2m1x8_to_f16x2, replayed in Python over every nibble in every
    position: word j holds values j and j + 4 as the f16 v * 2^-14."""
    g = torch.Generator().manual_seed(3)
    words = torch.randint(0, 2 ** 32, (512,), generator=g, dtype=torch.int64).tolist() + [0x76543210, 0xFEDCBA98]
    from sglang_smallm_plugin.reference.quant import FP4_VALUES
    lut = FP4_VALUES.tolist()
    for w in words:
        for j in range(4):
            v = (w << (12 - 4 * j)) & 0xFFFFFFFF
            p = (v & 0x80008000) | ((v >> 3) & 0x0E000E00)
            halves = torch.tensor([p & 0xFFFF, p >> 16], dtype=torch.int32).to(torch.int16).view(torch.float16)
            want = [lut[(w >> (4 * j)) & 15], lut[(w >> (4 * (j + 4))) & 15]]
            assert halves.float().tolist() == [x * 2.0 ** -14 for x in want], (hex(w), j)
