"""How much vector-ALU work the gfx950 block kernel (variant 0, the gfx950 default) spends per weight byte, read
from its assembly (`sglang-smallm isa`), against the HBM rate of an MI355X: an estimate, nothing here ran on AMD.

The block kernel holds a thread's weight vectors (16 bytes each) in registers and, for the (token, slot) pairs
routed to the item's expert, converts them and multiplies: phase 1 (gate/up) converts to bf16 pairs and takes
`v_dot2c_f32_bf16` with x (bf16, from LDS); phase 2 (down) converts to fp32 pairs and multiplies them with h (fp32,
from LDS) on `v_pk_fma_f32`. Both take an expert's pairs two at a time (each vector converted once for both) and
a last odd pair alone, so their arithmetic per weight byte still grows with the pairs an expert has, more slowly.
This script finds those steps' basic blocks: phase 1's by their `v_dot2` (eight or more), phase 2's by their
fp32 conversions (`v_cvt_scalef32_pk_f32_*`, eight or more); a block's vectors are its conversions over the
conversions one vector takes (values / 2), its pairs phase 1's dots over its conversions and phase 2's bytes of h
read from LDS over the bytes one pair takes (4 a value). It counts vector instructions per weight vector per
pair and sets them against an issue budget: a CU issues about one wave64 vector instruction a cycle (four SIMDs
of 16 lanes; MI355X: 256 CUs at 2.4 GHz, the non-packed FP32 vector rate of its data sheet), and one wave
instruction per lane-vector covers 64 x 16 bytes = 1 KiB of weights, which HBM (8 TB/s) delivers in 1 KiB /
8 TB/s. "Pairs per expert at the budget" weighs the two phases by their bytes (W13 two thirds, W2 one third) at
their two-pair steps: past it, the pair steps alone would issue longer than HBM takes to deliver the bytes (a lower
bound on the work: the item's other instructions, the LDS bandwidth and the routing are not counted). SGLang's own
gfx950 kernel converts each weight once and multiplies on the matrix cores (MFMA), so its vector work per byte does
not grow with the pairs.

Usage: python examples/isa/valu_per_byte.py FILE.s [--cus 256 --ghz 2.4 --tbs 8.0]
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from waitcnt import parse  # noqa: E402 - the kernels of an assembly file, as waitcnt.py splits them

_LABEL = re.compile(r"^(\.LBB\w+):")
_KERNEL = re.compile(r"smallm_moe_kernelILi(\d)ELi(\d)E")
FORMATS = {"0": ("fp8_block128", 16), "1": ("mxfp4", 32)}  # values per 16-byte weight vector
LAYOUTS = {"0": "row_major", "1": "shuffle16x16"}


def blocks(text: str) -> dict[str, list[list[str]]]:
    """gfx950 assembly -> {kernel name: its basic blocks, each a list of instructions (no comments/directives)}."""
    out: dict[str, list[list[str]]] = {}
    for name, lines in parse(text).items():
        cur = out[name] = [[]]
        for line in lines:
            code = line.split(";")[0].strip()
            if _LABEL.match(code):
                cur.append([])
            elif code and not code.startswith(".") and not code.endswith(":"):
                cur[-1].append(code)
    return out


_LDS_BYTES = {"ds_read_b128": 16, "ds_read_b96": 12, "ds_read_b64": 8, "ds_read2_b64": 16, "ds_read_b32": 4,
              "ds_read2_b32": 8}


def _counts(ins: list[str]) -> dict:
    return dict(valu=sum(1 for i in ins if i.startswith("v_")), dots=sum(1 for i in ins if i.startswith("v_dot2")),
                cvt=sum(1 for i in ins if i.startswith("v_cvt_scalef32_pk_bf16")),
                cvt_f32=sum(1 for i in ins if i.startswith("v_cvt_scalef32_pk_f32")),
                pk_fma=sum(1 for i in ins if i.startswith("v_pk_fma_f32")),
                lds=sum(1 for i in ins if i.startswith("ds_read")),
                lds_bytes=sum(_LDS_BYTES.get(i.split()[0], 0) for i in ins), n=len(ins))


def pair_steps(kernel_blocks: list[list[str]], min_dots: int = 8) -> list[dict]:
    """Phase 1's pair steps: the blocks with at least min_dots v_dot2 instructions, with their vector-ALU, v_dot2,
    scale-convert and LDS counts."""
    return [c for c in map(_counts, kernel_blocks) if c["dots"] >= min_dots]


def down_steps(kernel_blocks: list[list[str]], min_cvt: int = 8) -> list[dict]:
    """Phase 2's pair steps: the blocks with at least min_cvt fp32 conversions (and no v_dot2)."""
    return [c for c in map(_counts, kernel_blocks) if c["cvt_f32"] >= min_cvt and c["dots"] == 0]


def step_vectors(step: dict, values_per_vector: int) -> float:
    """The weight vectors a step converts: values/2 conversions each (phase 1 to bf16 pairs, phase 2 to fp32)."""
    return (step["cvt"] if step["dots"] else step["cvt_f32"]) / (values_per_vector // 2)


def step_pairs(step: dict, values_per_vector: int) -> int:
    """The pairs a step takes: phase 1 its dots over its conversions (each vector converted once, values/2 dots
    per vector and pair), phase 2 its packed FMAs over its conversions (values/2 per vector and pair)."""
    if step["dots"]:
        return round(step["dots"] / step["cvt"])
    return round(step["pk_fma"] / step["cvt_f32"])


def lds_per_vector_pair(step: dict, values_per_vector: int) -> float:
    """Bytes a lane reads from LDS per weight vector per pair in a step: phase 1 x (bf16), phase 2 h (fp32); a read
    that serves several of the step's vectors (phase 1's gate and up rows, phase 2's rows of one thread) counts once."""
    return step["lds_bytes"] / (step_vectors(step, values_per_vector) * step_pairs(step, values_per_vector))


def per_vector_pair(step: dict, values_per_vector: int) -> float:
    """Vector instructions per 16-byte weight vector per pair: a vector's values take values/2 conversions (and, in
    phase 1, values/2 v_dot2 per pair)."""
    return step["valu"] / (step_vectors(step, values_per_vector) * step_pairs(step, values_per_vector))


def budget_per_kib(cus: int, ghz: float, tbs: float) -> float:
    """Wave64 vector instructions a GPU issues (one a cycle a CU) while HBM delivers 1 KiB."""
    return cus * ghz * 1e9 / (tbs * 1e12 / 1024)


def by_bytes(up: float, down: float) -> float:
    """Instructions per weight vector and pair over both phases, weighed by their bytes: W13 (phase 1) is two
    thirds of an expert's weights, W2 (phase 2) one third."""
    return (2 * up + down) / 3


def _worst(steps: list[dict], values: int, pairs: int) -> float:
    got = [per_vector_pair(s, values) for s in steps if step_pairs(s, values) == pairs]
    return max(got) if got else float("nan")


def summary(text: str, cus=256, ghz=2.4, tbs=8.0, lds_rate=128) -> list[dict]:
    """Per block kernel: each phase's vector instructions per 16-byte vector per pair in its one-pair and two-pair
    steps (the worst block of each; nan where the build has none), and the pairs per expert at the budget (the
    phases weighed by their bytes at their two-pair steps, or one-pair steps where a build takes pairs one by one).
    Also each phase's LDS bytes a lane reads per vector and pair (the most of any step) and the pairs per expert at
    which those reads, at lds_rate bytes a cycle a CU, would take as long as HBM takes for the weights: the same
    budget of CU cycles per KiB, a KiB of weights being one wave's vector (64 lanes), its LDS bytes 64 times a
    lane's."""
    budget = budget_per_kib(cus, ghz, tbs)
    rows = []
    for name, bl in blocks(text).items():
        m = _KERNEL.search(name)
        if not m:
            continue
        fmt, per_vec = FORMATS[m.group(1)]
        up, down = pair_steps(bl), down_steps(bl)
        if not up:
            continue
        r = dict(kernel=f"{fmt} {LAYOUTS[m.group(2)]}", steps=len(up), down_steps=len(down),
                 up_one=_worst(up, per_vec, 1), up_two=_worst(up, per_vec, 2),
                 down_one=_worst(down, per_vec, 1), down_two=_worst(down, per_vec, 2), budget=budget)
        r["valu_per_vector_pair"] = max(r["up_one"], r["up_two"])  # phase 1's heaviest step, as before
        # a build without two-pair steps (before 2026-12-05) is weighed at its one-pair steps
        r["mixed_two"] = by_bytes(*(r[f"{p}_one"] if math.isnan(r[f"{p}_two"]) else r[f"{p}_two"] for p in ("up", "down")))
        r["bytes_per_valu"] = 16 * 64 / r["mixed_two"]
        r["pairs_at_budget"] = budget / r["mixed_two"]
        for phase, steps in (("up", up), ("down", down)):
            r[f"{phase}_lds"] = max(lds_per_vector_pair(s, per_vec) for s in steps) if steps else float("nan")
        r["lds_rate"] = lds_rate
        r["pairs_at_lds"] = budget / (by_bytes(r["up_lds"], r["down_lds"]) * 64 / lds_rate)
        rows.append(r)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("asm")
    p.add_argument("--cus", type=int, default=256)
    p.add_argument("--ghz", type=float, default=2.4)
    p.add_argument("--tbs", type=float, default=8.0)
    p.add_argument("--lds", type=int, default=128, help="LDS bytes a CU returns a cycle")
    a = p.parse_args(argv)
    rows = summary(Path(a.asm).read_text(), a.cus, a.ghz, a.tbs, a.lds)
    if not rows:
        print("no block-kernel pair step found", file=sys.stderr)
        return 1
    print(f"issue budget: {rows[0]['budget']:.0f} wave64 vector instructions per KiB of weights from HBM "
          f"({a.cus} CUs x {a.ghz} GHz, {a.tbs} TB/s)")
    print("vector instructions per 16-byte weight vector per pair, a step taking one pair / two pairs:")
    print("| block kernel | phase 1 (gate/up) | phase 2 (down) | both, by bytes, two pairs | pairs per expert at the budget "
          f"| LDS bytes a lane reads per vector and pair (phase 1 / 2) | pairs per expert at {a.lds} LDS bytes a cycle |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kernel']} | {r['up_one']:.1f} / {r['up_two']:.1f} | {r['down_one']:.1f} / {r['down_two']:.1f} | "
              f"{r['mixed_two']:.1f} | {r['pairs_at_budget']:.1f} | {r['up_lds']:.0f} / {r['down_lds']:.0f} | "
              f"{r['pairs_at_lds']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
