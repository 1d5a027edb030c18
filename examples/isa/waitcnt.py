"""Where a gfx950 kernel waits for its global loads, read from its assembly (`sglang-smallm isa`).

AMD GPUs count a wave's outstanding vector-memory operations (loads, atomics with a result, loads
into LDS) on one counter, vmcnt, and they complete in order for the count: `s_waitcnt vmcnt(N)`
waits until at most the N newest are outstanding. A wait for data loaded after the next item's
weights therefore waits for those weights too, and `vmcnt(0)` waits for everything in flight. Where
the next item's weight loads are followed, before the current item's arithmetic, by a wait that
covers them, no weight load overlaps that arithmetic (the sm_90 counterpart: examples/sass/scoreboards.py).

Usage: python examples/isa/waitcnt.py FILE.s NAME_PART [NAME_PART...]
prints, per kernel whose mangled name contains NAME_PART, the sequence (line numbers within the
kernel) of: non-temporal 16-byte loads, the package's weight loads (`LDW`), other global loads
(`LD`), global atomics that return a value (`ATOM`), vmcnt waits (`W<n>`), LDS writes (`STS`),
v_dot2 instructions (`DOT`), barriers (`BAR`) and loop headers (`LOOP<depth>`). The order is the
text's, not a path's: loads under guards sit in their own basic blocks.
"""
from __future__ import annotations

import argparse
import pathlib
import re

_FUNC = re.compile(r"^\s*\.type\s+(\S+),@function")
_VMCNT = re.compile(r"\bvmcnt\((\d+)\)")
_LOOP = re.compile(r"Loop Header: Depth=(\d+)")


def parse(text: str) -> dict[str, list[str]]:
    """gfx950 assembly -> {mangled kernel name: its lines from its `.type` directive to the next}."""
    kernels: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = m.group(1)
            kernels[current] = []
        elif current is not None:
            kernels[current].append(line)
    return kernels


def event(line: str) -> str | None:
    """The event a line is, or None."""
    loop = _LOOP.search(line)
    if loop:
        return f"LOOP{loop.group(1)}"
    code = line.split(";", 1)[0].strip()
    if not code or code.endswith(":") or code.startswith("."):
        return None
    op = code.split()[0]
    if op.startswith("global_load"):
        return "LDW" if op == "global_load_dwordx4" and re.search(r"\bnt\b", code) else "LD"
    if op.startswith("global_atomic") and re.search(r"\bsc0\b", code):  # sc0: the old value comes back
        return "ATOM"
    if op == "s_waitcnt":
        m = _VMCNT.search(code)
        return f"W{m.group(1)}" if m else None
    if op.startswith("ds_write"):
        return "STS"
    if op.startswith("v_dot2"):
        return "DOT"
    if op == "s_barrier":
        return "BAR"
    return None


def events(lines: list[str]) -> list[tuple[int, str, int]]:
    """(line index, event, repeat count), consecutive repeats folded."""
    out: list[tuple[int, str, int]] = []
    for i, line in enumerate(lines):
        e = event(line)
        if e is None:
            continue
        if out and out[-1][1] == e:
            out[-1] = (out[-1][0], e, out[-1][2] + 1)
        else:
            out.append((i, e, 1))
    return out


def drained_before_dot(evs: list[tuple[int, str, int]]) -> list[tuple[int, int]]:
    """(weight-load line, wait line) for each group of weight loads that a wait covers before the next
    `DOT`: a `W<n>` after m more vector-memory operations (loads, returning atomics) than the group's
    last load, with n <= m, leaves at most the n newest outstanding, so the group is complete. Counted in
    the text's order (a guard's basic block counts as issued)."""
    found = []
    for k, (i, e, _) in enumerate(evs):
        if e != "LDW" or (k > 0 and evs[k - 1][1] == "LDW"):
            continue
        after = 0
        for j, e2, n2 in evs[k + 1:]:
            if e2 == "DOT":
                break
            if e2 in ("LDW", "LD", "ATOM"):
                after += n2
            elif e2.startswith("W") and int(e2[1:]) <= after:
                found.append((i, j))
                break
    return found


_LABEL = re.compile(r"^(\.LBB\d+_\d+):")
_TARGET = re.compile(r"(\.LBB\d+_\d+)\b")


def blocks(lines: list[str]) -> tuple[list[list[tuple[int, str]]], list[list[int]]]:
    """A kernel's basic blocks, each [(line index, event)] with every vector-memory operation as its own
    event (`LDW`, `LD`, `ATOM`, or `VM` for other global or buffer operations, which count on vmcnt too),
    and each block's successors (fall-through and branch targets)."""
    starts, names = [0], {}
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            names[m.group(1)] = i
            starts.append(i)
    for i, line in enumerate(lines):
        op = line.split(";", 1)[0].strip().split(" ")[0]
        if op.startswith(("s_branch", "s_cbranch", "s_endpgm", "s_setpc")):
            starts.append(i + 1)
    starts = sorted(set(s for s in starts if s < len(lines)))
    index = {s: k for k, s in enumerate(starts)}
    evs, succ = [], []
    for k, s in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        found, nxt, falls = [], [], True
        for i in range(s, end):
            code = lines[i].split(";", 1)[0].strip()
            op = code.split(" ")[0] if code else ""
            e = event(lines[i])
            if e is None and op.startswith(("global_", "buffer_load", "buffer_store", "buffer_atomic", "flat_")):
                e = "VM"
            if e is not None and not e.startswith("LOOP"):
                found.append((i, e))
            if op.startswith(("s_branch", "s_cbranch")):
                t = _TARGET.search(code)
                if t and t.group(1) in names:
                    nxt.append(index[names[t.group(1)]])
                falls = not op.startswith("s_branch")
            elif op.startswith(("s_endpgm", "s_setpc")):
                falls = False
        if falls and k + 1 < len(starts):
            nxt.append(k + 1)
        evs.append(found)
        succ.append(nxt)
    return evs, succ


def weight_groups_in_flight(lines: list[str], size: int = 8) -> list[tuple[int, bool]]:
    """For each run of `size` or more weight loads (`LDW`) in one basic block: (its last load's line,
    whether some path from it reaches a `DOT` with that load possibly still outstanding, that is with no
    `W<n>` on the way whose n is at most the vector-memory operations issued since). A path ends at a DOT,
    at another run of weight loads (the next issue), or where the load is waited for."""
    evs, succ = blocks(lines)
    groups = []
    for b, found in enumerate(evs):
        run = 0
        for pos, (i, e) in enumerate(found):
            run = run + 1 if e == "LDW" else 0
            last = pos + 1 >= len(found) or found[pos + 1][1] != "LDW"
            if e == "LDW" and last and run >= size:
                groups.append((b, pos, i))
    out = []
    for b0, pos0, line0 in groups:
        seen, stack, reached = set(), [(b0, pos0 + 1, 0)], False
        while stack and not reached:
            b, pos, after = stack.pop()
            if (b, pos, after) in seen:
                continue
            seen.add((b, pos, after))
            stopped = False
            for i, e in evs[b][pos:]:
                if e == "DOT":
                    reached = True
                    break
                if e == "LDW" and after > 0 and (b != b0 or i > line0):
                    # another group's loads: the next issue
                    stopped = True
                    break
                if e in ("LDW", "LD", "ATOM", "VM"):
                    after = min(after + 1, 64)
                elif e.startswith("W") and int(e[1:]) <= after:
                    stopped = True
                    break
            if not reached and not stopped:
                stack.extend((n, 0, after) for n in succ[b])
        out.append((line0, reached))
    return out


def report(name: str, lines: list[str]) -> str:
    """A kernel's folded event line, and whether each run of weight loads reaches a DOT in flight."""
    seq = " ".join(f"{i}:{e}" + (f"x{n}" if n > 1 else "") for i, e, n in events(lines))
    text = f"{name} ({len(lines)} lines)\n  {seq}"
    flights = weight_groups_in_flight(lines)
    if flights:
        text += ("\n  weight loads (8 or more in a block) still in flight at a DOT on some path: " +
                 ", ".join(f"{i}: {'yes' if ok else 'no'}" for i, ok in flights))
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("asm", type=pathlib.Path)
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    kernels = parse(args.asm.read_text())
    print("\n".join(report(n, lines) for part in args.names for n, lines in kernels.items() if part in n))


if __name__ == "__main__":
    main()
