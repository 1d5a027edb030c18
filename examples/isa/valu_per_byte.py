"""How much vector-ALU work the gfx950 block kernel (variant 0, the gfx950 default) spends per weight byte, read
from its assembly (`sglang-smallm isa`), against the HBM rate of an MI355X: an estimate, nothing here ran on AMD.

The block kernel's phase 1 holds a thread's weight vectors (16 bytes each) in registers and, for each (token, slot)
pair routed to the item's expert, converts them to bf16 and takes their dot products with that pair's x
(`v_cvt_scalef32_pk_bf16_*`, `v_dot2c_f32_bf16`): its arithmetic per weight byte grows with the pairs an expert
has. This script finds the basic blocks of that pair step (eight or more `v_dot2`), counts their vector
instructions per weight vector per pair, and sets that against an issue budget: a CU issues about one wave64
vector instruction a cycle (four SIMDs of 16 lanes; MI355X: 256 CUs at 2.4 GHz, the non-packed FP32 vector rate
of its data sheet), and one wave instruction per lane-vector covers 64 x 16 bytes = 1 KiB of weights, which HBM
(8 TB/s) delivers in 1 KiB / 8 TB/s. Where pairs x instructions exceed that budget, the phase-1 arithmetic, not
HBM, sets the pace (a lower bound on the work: the item's other instructions, phase 2 and the routing are not
counted). SGLang's own gfx950 kernel converts each weight once and multiplies on the matrix cores (MFMA), so its
vector work per byte does not grow with the pairs.

Usage: python examples/isa/valu_per_byte.py FILE.s [--cus 256 --ghz 2.4 --tbs 8.0]
"""
from __future__ import annotations

import argparse
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


def pair_steps(kernel_blocks: list[list[str]], min_dots: int = 8) -> list[dict]:
    """The blocks with at least min_dots v_dot2 instructions: their vector-ALU, v_dot2, scale-convert and LDS counts."""
    rows = []
    for ins in kernel_blocks:
        dots = sum(1 for i in ins if i.startswith("v_dot2"))
        if dots >= min_dots:
            rows.append(dict(valu=sum(1 for i in ins if i.startswith("v_")), dots=dots,
                             cvt=sum(1 for i in ins if i.startswith("v_cvt_scalef32")),
                             lds=sum(1 for i in ins if i.startswith("ds_read")), n=len(ins)))
    return rows


def per_vector_pair(step: dict, values_per_vector: int) -> float:
    """Vector instructions per 16-byte weight vector per pair: a vector's values take values/2 v_dot2."""
    return step["valu"] / (step["dots"] / (values_per_vector // 2))


def budget_per_kib(cus: int, ghz: float, tbs: float) -> float:
    """Wave64 vector instructions a GPU issues (one a cycle a CU) while HBM delivers 1 KiB."""
    return cus * ghz * 1e9 / (tbs * 1e12 / 1024)


def summary(text: str, cus=256, ghz=2.4, tbs=8.0) -> list[dict]:
    budget = budget_per_kib(cus, ghz, tbs)
    rows = []
    for name, bl in blocks(text).items():
        m = _KERNEL.search(name)
        if not m:
            continue
        fmt, per_vec = FORMATS[m.group(1)]
        steps = pair_steps(bl)
        if not steps:
            continue
        worst = max(per_vector_pair(s, per_vec) for s in steps)
        rows.append(dict(kernel=f"{fmt} {LAYOUTS[m.group(2)]}", steps=len(steps), valu_per_vector_pair=worst,
                         bytes_per_valu=16 * 64 / worst, pairs_at_budget=budget / worst, budget=budget))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("asm")
    p.add_argument("--cus", type=int, default=256)
    p.add_argument("--ghz", type=float, default=2.4)
    p.add_argument("--tbs", type=float, default=8.0)
    a = p.parse_args(argv)
    rows = summary(Path(a.asm).read_text(), a.cus, a.ghz, a.tbs)
    if not rows:
        print("no block-kernel pair step found", file=sys.stderr)
        return 1
    print(f"issue budget: {rows[0]['budget']:.0f} wave64 vector instructions per KiB of weights from HBM "
          f"({a.cus} CUs x {a.ghz} GHz, {a.tbs} TB/s)")
    print("| block kernel | pair-step blocks | vector instr. per 16-byte vector per pair | pairs per expert at the budget |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['kernel']} | {r['steps']} | {r['valu_per_vector_pair']:.1f} | {r['pairs_at_budget']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
