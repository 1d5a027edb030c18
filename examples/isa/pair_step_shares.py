"""The share of MI355X's HBM issue budget the gfx950 block kernel's pair steps take for a model's routing: each
distinct expert of a call takes its pairs in steps of two and a last one alone (valu_per_byte.py counts both steps
in the assembly), the two phases weighed by their bytes (W13 two thirds, W2 one third), averaged over the experts
a call touches (each expert's weights are the same bytes) and over 32 draws of the bench's routing
(sglang_smallm_plugin.testdata.make_routing, uniform). Then the same for the steps' LDS reads (x in phase 1, h in
phase 2, per pair: no saving from two pairs a step) against the time HBM takes for the bytes, at --lds bytes a CU
cycle. An estimate from the assembly and data-sheet rates; nothing here ran on AMD hardware
(docs/gfx950-isa-notes.md).

Usage: python examples/isa/pair_step_shares.py FILE.s [--shapes qwen35-tp4,minimax-m3] [--tokens 1,8,16,20,40,48]
       [--lds 128]
"""
from __future__ import annotations

import argparse
import collections
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import valu_per_byte  # noqa: E402


def expert_cost(pairs: int, one: float, two: float) -> float:
    """Vector instructions per weight vector for an expert with `pairs` pairs: steps of two, then one alone
    (a build without two-pair steps, two = nan, takes every pair alone)."""
    if math.isnan(two):
        return pairs * one
    return (pairs // 2) * 2 * two + (pairs % 2) * one


def share(row: dict, counts: list[int]) -> float:
    """Budget share for one call whose distinct experts have `counts` pairs each."""
    one = valu_per_byte.by_bytes(row["up_one"], row["down_one"])
    two = valu_per_byte.by_bytes(row["up_two"], row["down_two"])
    return sum(expert_cost(n, one, two) for n in counts) / len(counts) / row["budget"]


def lds_share(row: dict, counts: list[int]) -> float:
    """LDS time over HBM time for one call whose distinct experts have `counts` pairs each: each pair reads its own
    x and h, so an expert's LDS bytes grow with its pairs one for one."""
    per_pair = valu_per_byte.by_bytes(row["up_lds"], row["down_lds"]) * 64 / row["lds_rate"]
    return sum(counts) / len(counts) * per_pair / row["budget"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("asm")
    p.add_argument("--shapes", default="qwen35-tp4,minimax-m3,qwen3-235b-tp4")
    p.add_argument("--tokens", default="1,8,16,20,40,48")
    p.add_argument("--draws", type=int, default=32)
    p.add_argument("--lds", type=int, default=128, help="LDS bytes a CU returns a cycle")
    a = p.parse_args(argv)
    from sglang_smallm_plugin import testdata
    from sglang_smallm_plugin.shapes import shape_by_name

    rows = {r["kernel"].split()[0]: r for r in valu_per_byte.summary(Path(a.asm).read_text(), lds_rate=a.lds)}
    tokens = [int(t) for t in a.tokens.split(",")]
    for title, of in (("pair steps' vector instructions over MI355X's HBM issue budget", share),
                      (f"pair steps' LDS reads at {a.lds} bytes a CU cycle over HBM's time", lds_share)):
        print(title)
        print("| shape, format | " + " | ".join(f"{t} token{'s' if t != 1 else ''}" for t in tokens) + " |")
        print("|---|" + "---|" * len(tokens))
        for name in a.shapes.split(","):
            shape = shape_by_name(name)
            for fmt, row in rows.items():
                cells = []
                for t in tokens:
                    total = 0.0
                    for seed in range(a.draws):
                        _, ids = testdata.make_routing(shape, t, seed, "cpu")
                        total += of(row, list(collections.Counter(ids.flatten().tolist()).values()))
                    cells.append(f"{100 * total / a.draws:.0f} %")
                print(f"| {name}, {fmt} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
