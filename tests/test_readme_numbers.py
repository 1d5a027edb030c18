"""The README's H200 speed tables are the recorded runs they cite: every cell is read back from that run's
bench.json (`sglang-smallm bench`) and SGLang's peer table (`../shared/peer`, results_table.md) under
examples/results/, so a table cannot drift from its logs or be edited by hand."""

import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "examples" / "results"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    end = text.find("\n### ", start + len(title))
    return text[start:end if end > 0 else len(text)]


def _cited_run(section: str) -> pathlib.Path:
    """The run the section's table comes from: its first '"h200-sNN" run K' (words may wrap)."""
    m = re.search(r'"(h200-s\d+)"\s+run\s+(\d+)', section)
    assert m, "the section names no recorded run"
    run = RESULTS / m.group(1) / f"run{m.group(2)}"
    assert run.is_dir(), f"{run} is not in examples/results"
    return run


def _bench_rows(run: pathlib.Path) -> dict:
    """(format, shape, tokens) -> bench row, from every bench.json of the run."""
    rows = {}
    for f in sorted(run.rglob("bench.json")):
        data = json.loads(f.read_text())
        for r in data["rows"] if isinstance(data, dict) else data:
            rows[(r["format"], r["shape"], int(r["tokens"]))] = r
    assert rows, f"no bench.json under {run}"
    return rows


def _peer_full_us(run: pathlib.Path) -> dict:
    """(config, I, tokens) -> the peer's whole-layer time ("full us") with its jit helpers."""
    out = {}
    for f in sorted(run.rglob("results_table.md")):
        for block in f.read_text().split("### ")[1:]:
            head, _, body = block.partition("\n")
            m = re.match(r"helpers=jit, config=(\w+)", head)
            if not m:
                continue
            cols = None
            for line in body.splitlines():
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if cells and cells[0] == "T":
                    cols = cells
                elif cols and cells and cells[0].isdigit():
                    inters = [(i, int(re.match(r"I=(\d+)", c).group(1))) for i, c in enumerate(cols) if c.startswith("I=")]
                    for i, inter in inters:
                        out[(m.group(1), inter, int(cells[0]))] = float(cells[i + 2])  # roof, gemm, full
    assert out, f"no peer table under {run}"
    return out


def _table(section: str) -> list:
    lines = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| tokens")]
    return [[c.strip().strip("*") for c in ln.strip().strip("|").split("|")] for ln in lines]


def _kernel_cell(row: dict, dependent: bool) -> str:
    if dependent:
        return f"{row['kernel_us']:.1f} ({row['over_floor']:.2f}x; {row['over_floor_2dep']:.2f}x)"
    return f"{row['kernel_us']:.1f} ({row['over_floor']:.2f}x)"


def _check_table(title: str, label: str, cells_for) -> None:
    """Every row of the README table under `title` equals cells_for(bench, peer, tokens) from the run the
    section cites."""
    section = _section(title)
    run = _cited_run(section)
    bench, peer = _bench_rows(run), _peer_full_us(run)
    rows = _table(section)
    assert len(rows) >= 5, f"the README {label} table lost its rows"
    for cells in rows:
        t = int(cells[0])
        assert cells[1:] == cells_for(bench, peer, t), f"README {label} table, {t} tokens, differs from {run.relative_to(ROOT)}"


def _kernel_cell_if_timed(bench: dict, key: tuple) -> str:
    """The cell of a column the run did not time at every count (MXFP4 beside FP8): a dash where the run has no
    such row, never where it has one."""
    return _kernel_cell(bench[key], True) if key in bench else "—"


def _peer_cell(peer: dict, inter: int, t: int) -> str:
    return f"{peer[('shipped', inter, t)]:.1f} / {peer[('tunedN512', inter, t)]:.1f}"


def test_qwen35_table_is_its_run():
    _check_table("### H200 speed (Qwen3.5-397B MoE layer, µs per call)", "Qwen3.5", lambda bench, peer, t: [
        _kernel_cell(bench[("fp8_block128", "qwen35-tp4", t)], True), _peer_cell(peer, 256, t),
        _kernel_cell(bench[("fp8_block128", "qwen35-tp8", t)], True), _peer_cell(peer, 128, t),
        _kernel_cell_if_timed(bench, ("mxfp4", "qwen35-tp4", t)), _kernel_cell_if_timed(bench, ("mxfp4", "qwen35-tp8", t))])


def test_qwen35_table_shows_mxfp4_at_most_counts():
    """The dashes of the MXFP4 columns stay the exception: at least five counts of the table have both."""
    section = _section("### H200 speed (Qwen3.5-397B MoE layer, µs per call)")
    rows = _table(section)
    assert sum(1 for cells in rows if "—" not in cells[5:7]) >= 5


def test_i384_table_is_its_run():
    _check_table("### H200 speed at I = 384", "I = 384", lambda bench, peer, t: [
        _kernel_cell(bench[("fp8_block128", "D4096-E513-K11-I384-S1", t)], False), _peer_cell(peer, 384, t),
        _kernel_cell(bench[("fp8_block128", "qwen3-235b-tp4", t)], False)])
