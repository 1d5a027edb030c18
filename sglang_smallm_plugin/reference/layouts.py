"""AITER weight and scale layouts, byte-exact.

shuffle_weight(w, layout=(16, 16)): a byte permutation of the last two dims [N, K_bytes]
(fp8 and packed fp4 as bytes, bf16/fp16 as 2-byte elements). Tiles of IN=16 rows x 32 storage
elements; the unit is a 16-byte vector; inside a tile the order is
[vector index along K][row][bytes of the vector]; tiles in (row-tile, K-tile) row-major order.

e8m0_shuffle(scale): rows padded to a multiple of 256 and columns to 8 (pad value 0), the
byte matrix viewed as (R/32, 2, 16, C/8, 2, 4) and permuted (0, 3, 5, 2, 4, 1).
"""

import torch

from ._checks import require, require_tensor


def _elem_view(w: torch.Tensor) -> torch.Tensor:
    """View as an integer dtype of the same element size (so permutes are pure byte moves)."""
    size = w.element_size()
    require(size in (1, 2), f"shuffle_weight supports 1- and 2-byte elements, got {w.dtype}")
    return w.view(torch.uint8 if size == 1 else torch.int16)


def _shuffle_dims(w: torch.Tensor, layout):
    require_tensor(w, "w")
    require(w.dim() >= 2, f"w must have at least 2 dims [.., N, K], got shape {tuple(w.shape)}")
    require(tuple(layout) == (16, 16), f"only layout=(16, 16) is specified, got {tuple(layout)}")
    n, k = w.shape[-2], w.shape[-1]
    kv = 16 // w.element_size()  # elements per 16-byte vector
    bk = 32  # elements per tile along K
    require(n % 16 == 0, f"rows (dim -2) must be a multiple of 16, got {n}")
    require(k % bk == 0, f"dim -1 must be a multiple of {bk} elements, got {k}")
    return n, k, kv, bk


def shuffle_weight(w: torch.Tensor, layout=(16, 16)) -> torch.Tensor:
    """Row-major [.., N, K] -> AITER (16,16)-shuffled, same shape and dtype."""
    n, k, kv, bk = _shuffle_dims(w, layout)
    v = _elem_view(w.contiguous())
    lead = v.shape[:-2]
    t = v.reshape(-1, n // 16, 16, k // bk, bk // kv, kv)
    t = t.permute(0, 1, 3, 4, 2, 5).contiguous()
    return t.view(*lead, n, k).view(w.dtype)


def unshuffle_weight(w: torch.Tensor, layout=(16, 16)) -> torch.Tensor:
    """Inverse of shuffle_weight."""
    n, k, kv, bk = _shuffle_dims(w, layout)
    v = _elem_view(w.contiguous())
    lead = v.shape[:-2]
    t = v.reshape(-1, n // 16, k // bk, bk // kv, 16, kv)
    t = t.permute(0, 1, 4, 2, 3, 5).contiguous()
    return t.view(*lead, n, k).view(w.dtype)


def _e8m0_bytes(scale: torch.Tensor) -> torch.Tensor:
    require_tensor(scale, "scale", dim=2)
    require(scale.element_size() == 1, f"scale must be 1-byte e8m0, got {scale.dtype}")
    return scale.contiguous().view(torch.uint8)


def e8m0_shuffle(scale: torch.Tensor) -> torch.Tensor:
    """[R, C] e8m0 bytes -> AITER e8m0_shuffle layout, shape [R_pad256, C_pad8], same dtype."""
    b = _e8m0_bytes(scale)
    r, c = b.shape
    rp, cp = (r + 255) // 256 * 256, (c + 7) // 8 * 8
    padded = torch.zeros(rp, cp, dtype=torch.uint8, device=b.device)
    padded[:r, :c] = b
    t = padded.view(rp // 32, 2, 16, cp // 8, 2, 4).permute(0, 3, 5, 2, 4, 1).contiguous()
    return t.view(rp, cp).view(scale.dtype)


def e8m0_unshuffle(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of e8m0_shuffle, cropped back to [rows, cols]."""
    b = _e8m0_bytes(scale)
    rp, cp = b.shape
    require(rp % 256 == 0 and cp % 8 == 0, f"shuffled e8m0 must be [R%256==0, C%8==0], got {tuple(b.shape)}")
    require(rows <= rp and cols <= cp, "rows/cols larger than the shuffled matrix")
    t = b.view(rp // 32, cp // 8, 4, 16, 2, 2).permute(0, 5, 3, 1, 4, 2).contiguous()
    return t.view(rp, cp)[:rows, :cols].contiguous().view(scale.dtype)
