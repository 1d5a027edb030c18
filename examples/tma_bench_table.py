"""One table from examples/h200_tma_job.sh's bench logs (`sglang-smallm bench`, FP8): per (shape, T) each
log's kernel us with its ratio to the read floor, and each later log's ratio to the first (the
baseline, SMALLM_GATEUP_TMA=0). Usage: python3 tma_bench_table.py BASE.log OTHER.log..."""
import re
import sys
from pathlib import Path

ROW = re.compile(r"^(\S+)\s+fp8_block128\s+\S+\s+T=\s*(\d+)\s.*?kernel\s+([\d.]+) us\s+read floor\s+([\d.]+) us")


def read(path: Path) -> dict:
    """{(shape, T): (kernel us, read floor us)}; {} for a missing log."""
    if not path.exists():
        return {}
    rows = {}
    for line in path.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[(m.group(1), int(m.group(2)))] = (float(m.group(3)), float(m.group(4)))
    return rows


def main(paths) -> None:
    logs = [read(p) for p in paths]
    keys = sorted({k for log in logs for k in log})
    head = "  ".join(f"{p.stem:>16}" for p in paths) + "".join(f"  {p.stem + ' / ' + paths[0].stem:>22}" for p in paths[1:])
    print(f"{'shape':<11} {'T':>2}  {head}")
    for key in keys:
        cells = [f"{log[key][0]:7.1f} ({log[key][0] / log[key][1]:4.2f}x)" if key in log else f"{'-':>16}" for log in logs]
        base = logs[0].get(key)
        ratios = [f"{log[key][0] / base[0]:22.3f}" if key in log and base else f"{'-':>22}" for log in logs[1:]]
        print(f"{key[0]:<11} {key[1]:>2}  " + "  ".join(cells) + "".join(f"  {r}" for r in ratios))


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
