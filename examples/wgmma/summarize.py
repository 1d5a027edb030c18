"""One table from the wgmma probe's logs (examples/h200_wgmma_job.sh writes one log per run setting):
per (shape, tokens), each setting's gate/up us and its ratio to the W13 read floor of the same run,
a failed numerics check marked. Usage: python3 summarize.py LOG... (names probe_m<mode>_p<prefetch>
_d<depth>_x<xprep>[_s1][_w1][_r<stages>][_t1][_again].log; any other name is its own column)."""
import re
import sys
from pathlib import Path

ROW = re.compile(r"^(TP\d)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x\s+([\d.]+)\s+(\S+)(\s+FAIL)?\s*$")


def column(path: Path) -> str:
    m = re.match(r"probe_m(\d)_p(\d)_d(\d)_x(\d)(_s1)?(_w1)?(?:_r(\d))?(_t1)?(_again)?$", path.stem)
    if not m:
        return path.stem
    mode, pf, depth, xp, xsub, shuffled, ring, tma, again = m.groups()
    parts = [f"mode {mode}" if mode != "0" else "", "pf" if pf == "1" else "", "2 ahead" if depth == "3" else "",
             "xprep" if xp == "1" else "", "xsub" if xsub else "", "shuffled" if shuffled else "", f"ring {ring}" if ring else "", "tma" if tma else "", "again" if again else ""]
    return " ".join(p for p in parts if p) or "as run 1"


def read(path: Path) -> dict:
    """{(shape, T): (gate/up us, x floor, failed)} of one log."""
    rows = {}
    for line in path.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[(m.group(1), int(m.group(2)))] = (float(m.group(4)), float(m.group(7)), bool(m.group(10)))
    return rows


def main(paths) -> None:
    cols = [(column(p), read(p)) for p in paths]
    keys = sorted({k for _, rows in cols for k in rows})
    print("shape  T  " + "  ".join(f"{name:>18}" for name, _ in cols))
    for key in keys:
        cells = []
        for _, rows in cols:
            if key in rows:
                us, ratio, failed = rows[key]
                cells.append(f"{us:8.1f} ({ratio:4.2f}x){'!' if failed else ' '}")
            else:
                cells.append(f"{'-':>18}")
        print(f"{key[0]:<5} {key[1]:>2}  " + "  ".join(f"{c:>18}" for c in cells))
    if any(f for _, rows in cols for *_, f in rows.values()):
        print("!: that run's numerics check failed (modes 1-3 time only and are never checked)")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
