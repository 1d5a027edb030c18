"""MoE sort references, in the two output formats the fallbacks consume.

moe_sorting (AITER): per (token, slot) pair a packed int32 (slot << 24) | token; experts
ascending, then token, then slot; each expert's run padded to a multiple of block_size with
(topk << 24) | num_tokens and weight 0; experts without pairs get no block. Returns full-capacity
buffers (capacity = topk_ids.numel() + E * block_size - topk); entries past the padded length are
not part of the contract (a kernel leaves them unwritten; here they hold `tail`).

moe_align_block_size (SGLang Triton): flat pair index token * topk + slot, padding value
topk_ids.numel(); one expert id per block; the total padded count. Buffer sizes as SGLang 0.5.23
allocates them: numel * block when numel < E + 1, else numel + (E + 1) * (block - 1), rounded up
to a multiple of 4; one expert id per possible block. Pairs inside an expert's run are ascending
here; the contract is the set per block.
"""

import torch

from ._checks import require, require_tensor


def _check(topk_ids, num_experts, block_size):
    require_tensor(topk_ids, "topk_ids", dtypes=(torch.int32,), dim=2)
    require(isinstance(num_experts, int) and num_experts > 0, f"num_experts must be a positive int, got {num_experts!r}")
    require(isinstance(block_size, int) and block_size > 0, f"block_size must be a positive int, got {block_size!r}")
    ids = topk_ids.long()
    require(bool(((ids >= 0) & (ids < num_experts)).all()), f"topk_ids must lie in [0, {num_experts})")
    require(topk_ids.shape[0] < (1 << 24) and topk_ids.shape[1] < 256, "token index must fit 24 bits, slot 8 bits")
    return ids


def _runs(ids, num_experts, block_size):
    """Per expert: pairs (token, slot) in token-then-slot order, and the padded run length."""
    T, K = ids.shape
    flat = ids.reshape(-1)
    order = torch.argsort(flat * (T * K) + torch.arange(T * K, device=ids.device), stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    return order, counts, padded


def moe_sorting(topk_ids, topk_weights, num_experts: int, block_size: int, tail: int = -1):
    """-> (sorted_ids int32 [cap], sorted_weights fp32 [cap], sorted_expert_ids int32 [cap/block],
    num_valid_ids int32 [2] = [padded length, num_tokens])."""
    ids = _check(topk_ids, num_experts, block_size)
    require_tensor(topk_weights, "topk_weights", dtypes=(torch.float32,), dim=2)
    require(topk_weights.shape == topk_ids.shape, "topk_weights shape must equal topk_ids shape")
    T, K = ids.shape
    dev = ids.device
    cap = T * K + num_experts * block_size - K
    order, counts, padded = _runs(ids, num_experts, block_size)
    sorted_ids = torch.full((cap,), tail, dtype=torch.int32, device=dev)
    sorted_w = torch.full((cap,), float("nan"), dtype=torch.float32, device=dev)
    expert_ids = torch.full(((cap + block_size - 1) // block_size,), tail, dtype=torch.int32, device=dev)
    pad_value = (K << 24) | T
    pos, src, blk = 0, 0, 0
    flat_w = topk_weights.reshape(-1)
    for e in range(num_experts):
        c, p = int(counts[e]), int(padded[e])
        if c == 0:
            continue
        pairs = order[src:src + c]
        tok, slot = pairs // K, pairs % K
        sorted_ids[pos:pos + c] = ((slot << 24) | tok).to(torch.int32)
        sorted_w[pos:pos + c] = flat_w[pairs]
        sorted_ids[pos + c:pos + p] = pad_value
        sorted_w[pos + c:pos + p] = 0.0
        expert_ids[blk:blk + p // block_size] = e
        pos, src, blk = pos + p, src + c, blk + p // block_size
    num_valid = torch.tensor([pos, T], dtype=torch.int32, device=dev)
    return sorted_ids, sorted_w, expert_ids, num_valid


def moe_align_block_size(topk_ids, num_experts: int, block_size: int):
    """-> (sorted_token_ids int32 [max padded], expert_ids int32 [max blocks],
    num_tokens_post_padded int32 [1]). Unused tail entries hold the padding value / -1."""
    ids = _check(topk_ids, num_experts, block_size)
    numel = ids.numel()
    dev = ids.device
    if numel < num_experts + 1:
        max_padded = numel * block_size
    else:
        max_padded = numel + (num_experts + 1) * (block_size - 1)
    max_padded = (max_padded + 3) // 4 * 4
    order, counts, padded = _runs(ids, num_experts, block_size)
    sorted_ids = torch.full((max_padded,), numel, dtype=torch.int32, device=dev)
    expert_ids = torch.full(((max_padded + block_size - 1) // block_size,), -1, dtype=torch.int32, device=dev)
    pos, src, blk = 0, 0, 0
    for e in range(num_experts):
        c, p = int(counts[e]), int(padded[e])
        if c == 0:
            continue
        sorted_ids[pos:pos + c] = order[src:src + c].to(torch.int32)
        expert_ids[blk:blk + p // block_size] = e
        pos, src, blk = pos + p, src + c, blk + p // block_size
    return sorted_ids, expert_ids, torch.tensor([pos], dtype=torch.int32, device=dev)
