"""Which weight bytes a fused MoE call must read: the byte model, as a mask to check a kernel's loads against.

A call reads, once, every byte of each expert its routing touches, of the real intermediate size only: w13's gate
rows [0, I) and up rows [Iw, Iw + I) and w2's first I columns (I bytes FP8, I/2 MXFP4), where SGLang stores Iw = I +
inter_pad (its padding for AITER is never read). Untouched experts are not read at all. Masks are per `granule`
bytes of the stored tensor (row-major, or AITER's (16,16) shuffle, which moves whole 16-byte vectors).
"""

import torch

from ._checks import require
from .layouts import shuffle_weight


def _stored(one_expert: torch.Tensor, shuffled: bool, granule: int) -> torch.Tensor:
    """One expert's row-major byte mask [N, Kb] -> one bool per `granule` bytes of its stored bytes (flat)."""
    m = one_expert.to(torch.uint8)
    g = (shuffle_weight(m) if shuffled else m).reshape(-1, granule)
    require(bool((g.amin(1) == g.amax(1)).all()), f"a granule of {granule} bytes mixes read and unread bytes")
    return g[:, 0].bool()


def weight_read_masks(w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor, inter: int, shuffled: bool,
                      granule: int = 16):
    """(w13 mask, w2 mask), each [E, granules per expert]: per `granule` bytes of the stored w13 [E, 2Iw, Kb] and
    w2 [E, D, Iwb], whether the call must read them (once); everything else must not be read. `inter` is the
    computed I (not Iw)."""
    E, rows13, kb13 = w13.shape
    _, D, kb2 = w2.shape
    iw = rows13 // 2
    ib = kb2 * inter // iw  # w2 bytes per row of the real I (I, or I/2 for packed fp4)
    touched = torch.zeros(E, dtype=torch.bool)
    touched[topk_ids.flatten().long().cpu()] = True
    e13 = torch.zeros(rows13, kb13, dtype=torch.bool)
    e13[:inter] = True
    e13[iw:iw + inter] = True
    e2 = torch.zeros(D, kb2, dtype=torch.bool)
    e2[:, :ib] = True
    return (touched[:, None] & _stored(e13, shuffled, granule)[None, :],
            touched[:, None] & _stored(e2, shuffled, granule)[None, :])


def row_end_vectors(w: torch.Tensor, shuffled: bool, granule: int = 16) -> torch.Tensor:
    """Per `granule` bytes of one expert's stored [N, Kb] slab of `w` [E, N, Kb] (flat): whether it is a row's last
    16-byte vector (the one a HIP kernel loads again for lanes past the row's end, whose values it does not use)."""
    m = torch.zeros(w.shape[1], w.shape[2], dtype=torch.bool)
    m[:, -16:] = True
    return _stored(m, shuffled, granule)


def check_weight_reads(w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor, inter: int, shuffled: bool,
                       counts13: torch.Tensor, counts2: torch.Tensor, untracked: int, granule: int = 16):
    """Counted weight loads (bytes per `granule` of w13 and w2, flat, and the bytes loaded outside both) against
    the byte model. Returns (None or what differs, bytes loaded again at rows' last vectors): every byte of the
    mask read, exactly once, nothing else; the one allowance is a row's last vector of w13 loaded again (a
    HIP kernel's lanes past the row's end)."""
    E = w13.shape[0]
    c13, c2 = counts13.view(E, -1), counts2.view(E, -1)
    m13, m2 = weight_read_masks(w13, w2, topk_ids, inter, shuffled, granule)
    ends = row_end_vectors(w13, shuffled, granule)[None, :].expand_as(m13)
    extra = int((c13[m13 & ends] - granule).sum())
    if untracked:
        return f"{untracked} weight bytes loaded outside w13 and w2", extra
    for name, c, m in (("w13", c13, m13), ("w2", c2, m2)):
        if not torch.equal(c > 0, m):
            return (f"{name}: {int((m & (c == 0)).sum())} granules of touched experts' rows not read, "
                    f"{int((~m & (c > 0)).sum())} read outside them (untouched experts or padding)"), extra
    if not bool((c13[m13 & ~ends] == granule).all()) or not bool((c2[m2] == granule).all()):
        return "weights read more than once", extra
    if int(c13[m13 & ends].min()) < granule:
        return "a row's last vector read in part", extra
    return None, extra
