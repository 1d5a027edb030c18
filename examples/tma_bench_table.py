"""One table from examples/h200_tma_job.sh's bench logs (`sglang-smallm bench`, the TMA gate/up switch off
and on in alternating rounds): per (shape, T) each log's kernel us, the read floor of the first, and the
switch-on time over the read floor and over switch-off (means of the rounds). Usage: python3
tma_bench_table.py OFF.log ON.log [OFF2.log ON2.log ...] (logs alternate off, on)."""
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
    offs, ons = logs[0::2], logs[1::2]
    keys = sorted({k for log in logs for k in log})
    print("shape        T  " + "  ".join(f"{p.stem:>9}" for p in paths) + "   floor   on/floor  on/off")
    for key in keys:
        cells = [f"{log[key][0]:9.1f}" if key in log else f"{'-':>9}" for log in logs]
        off = [log[key][0] for log in offs if key in log]
        on = [log[key][0] for log in ons if key in log]
        floor = next((log[key][1] for log in logs if key in log), None)
        tail = ""
        if on and floor:
            tail += f"  {floor:6.1f}  {sum(on) / len(on) / floor:8.2f}x"
        if on and off:
            tail += f"  {sum(on) / len(on) / (sum(off) / len(off)):6.3f}"
        print(f"{key[0]:<11} {key[1]:>2}  " + "  ".join(cells) + tail)


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
