"""Shared-memory wavefronts of the tensor-core down's B loads, by a model (examples/results "h200-s34" run 4,
"h200-s35").

Each lane (g, q) of a warp loads 16 bytes of h's staged halves per instruction (`LDS.128`): column g
of the MMA's B is pair g / 2 of the pass, its hi half (even g) or lo half (odd g), and q picks the
piece of the row (FP8: 32 bytes apart, MXFP4: 16). A 16-byte load is served a quarter-warp (8 lanes)
at a time; within a quarter, lanes whose pieces fall in the same 16-byte bank group of different
128-byte lines take one wavefront each.
A quarter holds one pair's hi and lo rows, so the bank offset between those two rows decides (a row
being I + 8 f16 values, 16 bytes more than 128-byte aligned). Three layouts:
- "pair": rows p and N + p (the kernels before "h200-s35"): they share the FP8 bank groups whenever N
  is even, and the MXFP4 ones unless N % 8 == 4;
- "adjacent": the pair at place i of the pass order in rows 2i and 2i + 1, 16 bytes apart: never the
  FP8 groups (the kernel's FP8 stage), always the MXFP4 ones (pieces 16 bytes apart fill 64 bytes);
- "split": rows i and L + i, L the least >= N that is 4 mod 8 (down_mma_lo_row0), 64 bytes apart:
  never the MXFP4 groups (the kernel's MXFP4 stage).
The f16-lo stage only (kLo8's lo rows are e5m2, loaded 8 bytes at a time). Columns of a pass with
fewer than four pairs reread its first pair's rows, the same addresses: the count holds for them.

Usage: python examples/sass/stage_banks.py  (prints mean wavefronts per B load, 4 is the least)
"""
from __future__ import annotations

import random

from sglang_smallm_plugin.kernels import down_mma_lo_row0

lo_row0 = down_mma_lo_row0  # the "split" layout's first lo row: the package's mirror of the header's


def wavefronts(addresses: list[int]) -> int:
    """Wavefronts of one warp-wide 16-byte load: per quarter-warp, the most distinct 128-byte lines
    that hit one 16-byte bank group."""
    total = 0
    for k in range(4):
        groups: dict[int, set[int]] = {}
        for a in addresses[8 * k:8 * k + 8]:
            groups.setdefault((a // 16) % 8, set()).add(a // 128)
        total += max(len(lines) for lines in groups.values())
    return total


def b_addresses(fmt: str, rows_of, hst: int) -> list[int]:
    """Byte addresses of the 32 lanes' loads; rows_of(k, lo) is the stage row of the pass's pair k."""
    piece = 32 if fmt == "fp8" else 16
    return [rows_of(lane >> 3, (lane >> 2) & 1) * 2 * hst + piece * (lane & 3) for lane in range(32)]


def mean_wavefronts(fmt: str, layout: str, N: int, I: int = 256, pad: int = 8, trials: int = 200) -> float:
    rng = random.Random(N)
    hst, total = I + pad, 0
    for _ in range(trials):
        if layout == "pair":  # rows p and N + p, four pairs of an expert anywhere in 0..N-1
            pairs = rng.sample(range(N), 4)
            rows = lambda k, lo, pairs=pairs: pairs[k] + (N if lo else 0)  # noqa: E731
        else:  # the pass's pairs at consecutive places i0..i0+3
            i0 = rng.randrange(N - 3)
            if layout == "adjacent":
                rows = lambda k, lo, i0=i0: 2 * (i0 + k) + lo  # noqa: E731
            else:  # "split"
                rows = lambda k, lo, i0=i0: i0 + k + (lo_row0(N) if lo else 0)  # noqa: E731
        total += wavefronts(b_addresses(fmt, rows, hst))
    return total / trials


if __name__ == "__main__":
    counts = (11, 22, 33, 44, 88, 132, 176, 220)  # Qwen3.5 (11 slots) at 1, 2, 3, 4, 8, 12, 16, 20 tokens
    print("pairs N:" + "".join(f"{n:>6}" for n in counts))
    for fmt in ("fp8", "mxfp4"):
        for layout in ("pair", "adjacent", "split"):
            row = "".join(f"{mean_wavefronts(fmt, layout, n):6.1f}" for n in counts)
            print(f"{fmt:5} rows by {layout:8}:{row}")
