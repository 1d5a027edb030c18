"""MoE sort references, in the two output formats the fallbacks consume, and the sorted MXFP8
activation scales.

moe_sorting (AITER): per (token, slot) pair a packed int32 (slot << 24) | token; experts
ascending, then token, then slot; each expert's run padded to a multiple of block_size with
(topk << 24) | num_tokens and weight 0; experts without pairs get no block. Pairs whose expert id
lies outside [0, E) are dropped (they belong to no expert, so they contribute nothing). Returns
full-capacity buffers (capacity = topk_ids.numel() + E * block_size - topk); entries past the
padded length are not part of the contract (a kernel leaves them unwritten; here they hold `tail`).

moe_align_block_size (SGLang Triton, its "+1" convention): flat pair index token * topk + slot,
padding value topk_ids.numel(); ids outside [0, E) (SGLang pads with -1) form a leading bucket
whose blocks carry expert id -1; one expert id per block; the total padded count. Buffer sizes as
SGLang 0.5.23 allocates them: numel * block when numel < E + 1, else numel + (E + 1) * (block - 1),
rounded up to a multiple of 4. Pairs inside a bucket ascend here; the contract is the set per block.

sorted_mxfp8_scales (AITER's per_1x32 activation scales for its MoE): one e8m0 byte per (sorted
row, 32-group); row r holds the scales of the token of sorted_ids[r], padding rows and columns past
D / 32 hold 0; stored as 32-row x 8-column tiles of 256 bytes (e8m0_shuffle's tile order), rows
rounded up to 32 and columns to 8.
"""

import torch

from ._checks import require, require_tensor
from .layouts import e8m0_shuffle
from .quant import mxfp8_quant


def _check(topk_ids, num_experts, block_size):
    require_tensor(topk_ids, "topk_ids", dtypes=(torch.int32,), dim=2)
    require(isinstance(num_experts, int) and num_experts > 0, f"num_experts must be a positive int, got {num_experts!r}")
    require(isinstance(block_size, int) and block_size > 0, f"block_size must be a positive int, got {block_size!r}")
    require(topk_ids.shape[0] < (1 << 24) and topk_ids.shape[1] < 256, "token index must fit 24 bits, slot 8 bits")
    return topk_ids.long()


def _buckets(ids, num_experts, invalid_bucket):
    """Bucket per pair: expert id + offset for valid ids, `invalid_bucket` for the rest (None: dropped, -1)."""
    valid = (ids >= 0) & (ids < num_experts)
    if invalid_bucket is None:
        return torch.where(valid, ids, torch.full_like(ids, -1))
    return torch.where(valid, ids + 1, torch.full_like(ids, invalid_bucket))


def _layout(buckets, num_buckets, block_size):
    """-> list of (bucket, flat pair indices ascending, padded length) for non-empty buckets, in order."""
    flat = buckets.reshape(-1)
    keep = torch.nonzero(flat >= 0).reshape(-1)
    order = keep[torch.argsort(flat[keep], stable=True)]
    counts = torch.bincount(flat[keep], minlength=num_buckets).tolist()
    runs, src = [], 0
    for b, c in enumerate(counts):
        if c:
            runs.append((b, order[src:src + c], (c + block_size - 1) // block_size * block_size))
            src += c
    return runs


def moe_sorting(topk_ids, topk_weights, num_experts: int, block_size: int, tail: int = -1):
    """-> (sorted_ids int32 [cap], sorted_weights fp32 [cap], sorted_expert_ids int32 [cap/block],
    num_valid_ids int32 [2] = [padded length, num_tokens])."""
    ids = _check(topk_ids, num_experts, block_size)
    require_tensor(topk_weights, "topk_weights", dtypes=(torch.float32,), dim=2)
    require(topk_weights.shape == topk_ids.shape, "topk_weights shape must equal topk_ids shape")
    T, K = ids.shape
    dev = ids.device
    cap = T * K + num_experts * block_size - K
    sorted_ids = torch.full((cap,), tail, dtype=torch.int32, device=dev)
    sorted_w = torch.full((cap,), float("nan"), dtype=torch.float32, device=dev)
    expert_ids = torch.full(((cap + block_size - 1) // block_size,), tail, dtype=torch.int32, device=dev)
    pad_value = (K << 24) | T
    flat_w = topk_weights.reshape(-1)
    pos = 0
    for e, pairs, p in _layout(_buckets(ids, num_experts, None), num_experts, block_size):
        c = pairs.numel()
        tok, slot = pairs // K, pairs % K
        sorted_ids[pos:pos + c] = ((slot << 24) | tok).to(torch.int32)
        sorted_w[pos:pos + c] = flat_w[pairs]
        sorted_ids[pos + c:pos + p] = pad_value
        sorted_w[pos + c:pos + p] = 0.0
        expert_ids[pos // block_size:(pos + p) // block_size] = e
        pos += p
    num_valid = torch.tensor([pos, T], dtype=torch.int32, device=dev)
    return sorted_ids, sorted_w, expert_ids, num_valid


def triton_buffer_sizes(numel: int, num_experts: int, block_size: int) -> tuple:
    """(sorted_ids length, expert_ids length) as SGLang 0.5.23's moe_align_block_size allocates them."""
    if numel < num_experts + 1:
        max_padded = numel * block_size
    else:
        max_padded = numel + (num_experts + 1) * (block_size - 1)
    max_padded = (max_padded + 3) // 4 * 4
    return max_padded, (max_padded + block_size - 1) // block_size


def moe_align_block_size(topk_ids, num_experts: int, block_size: int, tail_ids=None, tail_experts=-1):
    """-> (sorted_token_ids int32 [max padded], expert_ids int32 [max blocks],
    num_tokens_post_padded int32 [1]). Unused tail entries hold tail_ids (default: the padding
    value) / tail_experts."""
    ids = _check(topk_ids, num_experts, block_size)
    numel = ids.numel()
    dev = ids.device
    max_padded, max_blocks = triton_buffer_sizes(numel, num_experts, block_size)
    sorted_ids = torch.full((max_padded,), numel if tail_ids is None else tail_ids, dtype=torch.int32, device=dev)
    expert_ids = torch.full((max_blocks,), tail_experts, dtype=torch.int32, device=dev)
    pos = 0
    for b, pairs, p in _layout(_buckets(ids, num_experts, 0), num_experts + 1, block_size):
        sorted_ids[pos:pos + pairs.numel()] = pairs.to(torch.int32)
        sorted_ids[pos + pairs.numel():pos + p] = numel
        expert_ids[pos // block_size:(pos + p) // block_size] = b - 1
        pos += p
    return sorted_ids, expert_ids, torch.tensor([pos], dtype=torch.int32, device=dev)


def scale_cols(hidden: int) -> int:
    """Bytes per sorted-scale row: D / 32 groups rounded up to 8."""
    return (hidden // 32 + 7) // 8 * 8


def sorted_mxfp8_scales(scales, sorted_ids, num_valid_ids, num_tokens: int, tail: int = 0xAA):
    """Per-token e8m0 scales [T, D/32] -> the sorted, tile-shuffled buffer (uint8, one row per
    capacity row rounded up to 32, scale_cols(D) wide, flattened to [rows, cols]). Rows at or past
    the padded length hold `tail` (outside the contract)."""
    require_tensor(scales, "scales", dtypes=(torch.uint8,), dim=2)
    T, N = scales.shape
    cols = (N + 7) // 8 * 8
    cap = sorted_ids.numel()
    rows = (cap + 31) // 32 * 32
    valid = int(num_valid_ids[0])
    gathered = torch.zeros(rows, cols, dtype=torch.uint8, device=scales.device)
    tok = (sorted_ids[:valid].long() & 0xFFFFFF)
    real = tok < num_tokens
    gathered[:valid, :N][real] = scales[tok[real]]
    out = e8m0_shuffle(gathered).reshape(-1)[: rows * cols].clone()  # tiles are per 32 rows
    tiles_valid = valid * cols  # valid is a multiple of block_size, itself a multiple of 32
    out[tiles_valid:] = tail
    return out.view(rows, cols)


def moe_sorting_mxfp8(topk_ids, topk_weights, x, num_experts: int, block_size: int):
    """moe_sorting plus the fused activation quantisation: -> (sorted_ids, sorted_weights,
    sorted_expert_ids, num_valid_ids, xq e4m3fn [T, D], xs uint8 sorted scales)."""
    require(block_size % 32 == 0, f"fused MXFP8 needs block_size % 32 == 0, got {block_size}")
    sorted_ids, sorted_w, expert_ids, num_valid = moe_sorting(topk_ids, topk_weights, num_experts, block_size)
    xq, s = mxfp8_quant(x)
    xs = sorted_mxfp8_scales(s, sorted_ids, num_valid, x.shape[0])
    return sorted_ids, sorted_w, expert_ids, num_valid, xq, xs
