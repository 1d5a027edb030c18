"""Where a kernel waits for its weight loads, read from sm_90a SASS (`cuobjdump -sass`).

Every sm_90 instruction carries control bits (the top 23 bits of its 128-bit encoding): a stall
count, the scoreboard its result will release (write barrier, 0-5, 7 = none), the one its operands
will release (read barrier) and the scoreboards it waits for (a 6-bit mask). A wait on a scoreboard
waits until every operation counted on it has completed. When a job's weight loads and the next
job's count on the same scoreboard, a wait placed after the next job's loads are issued waits for
those too: the loads then overlap no computation.

Where no cuobjdump is installed, nvdisasm (pip: nvidia-cuda-nvdisasm) over an nvcc -cubin gives the same text:
`nvdisasm -c -hex k.cubin > k.sass` (examples/results "h200-s43", the SASS entry).

Usage: python examples/sass/scoreboards.py FILE.sass NAME_PART [NAME_PART...]
prints, per kernel whose mangled name contains NAME_PART, the sequence from instruction FROM on
(--from, default 0) of: 128-bit global loads grouped by scoreboard (`LDG<sb>x<count>`), waits on a
scoreboard that such loads use (`W<sb>:<opcode>`), HMMAs, barriers and DEPBARs (examples/results
"h200-ab11").
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

_FUNC = re.compile(r"\s+Function : (\S+)|//-+ \.text\.(\S+) -+$")  # cuobjdump -sass; nvdisasm -c -hex
_INSN = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/")
_HIGH = re.compile(r"/\* (0x[0-9a-f]+) \*/")


@dataclass(frozen=True)
class Control:
    stall: int
    write_barrier: int  # 7: none
    read_barrier: int  # 7: none
    wait_mask: int


def control(high_word: int) -> Control:
    """The control bits of an instruction from the high 64 bits of its encoding."""
    c = high_word >> 41
    return Control(stall=c & 0xF, write_barrier=(c >> 5) & 7, read_barrier=(c >> 8) & 7, wait_mask=(c >> 11) & 0x3F)


def parse(text: str) -> dict[str, list[tuple[str, Control]]]:
    """cuobjdump -sass or nvdisasm -c -hex text -> {mangled kernel name: [(instruction text, control bits)]}."""
    kernels: dict[str, list[tuple[str, Control]]] = {}
    current = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FUNC.match(lines[i])
        if m:
            current = m.group(1) or m.group(2)
            kernels[current] = []
        elif current is not None:
            m = _INSN.match(lines[i])
            if m and i + 1 < len(lines):
                high = _HIGH.search(lines[i + 1])
                if high:
                    kernels[current].append((m.group(2).strip(), control(int(high.group(1), 16))))
                    i += 2
                    continue
        i += 1
    return kernels


def opcode(insn: str) -> str:
    parts = insn.split()
    return parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]


def events(insns: list[tuple[str, Control]], start: int = 0) -> list[tuple[int, str, int]]:
    """(index, event, repeat count) from instruction `start` on."""
    load_barriers: set[int] = set()
    out: list[tuple[int, str, int]] = []

    def add(index: int, name: str) -> None:
        if out and out[-1][1] == name:
            out[-1] = (out[-1][0], name, out[-1][2] + 1)
        else:
            out.append((index, name, 1))

    for index, (insn, ctl) in enumerate(insns):
        op = opcode(insn)
        found = []
        if op.startswith("LDG") and "128" in op and ctl.write_barrier != 7:
            load_barriers.add(ctl.write_barrier)
            found.append(f"LDG{ctl.write_barrier}")
        for b in sorted(load_barriers):
            if ctl.wait_mask >> b & 1:
                found.insert(0, f"W{b}:{op}")
        if op.startswith("HMMA"):
            found.append("HMMA")
        if op.startswith("BAR") or "DEPBAR" in op:
            found.append(op)
        if index >= start:
            for name in found:
                add(index, name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass")
    ap.add_argument("names", nargs="+")
    ap.add_argument("--from", dest="start", type=int, default=0)
    args = ap.parse_args()
    with open(args.sass) as f:
        kernels = parse(f.read())
    for part in args.names:
        for name, insns in kernels.items():
            if part in name:
                seq = " ".join(f"{i}:{e}" + (f"x{n}" if n > 1 else "") for i, e, n in events(insns, args.start))
                print(f"{name} ({len(insns)} instructions)\n  {seq}")


if __name__ == "__main__":
    main()
