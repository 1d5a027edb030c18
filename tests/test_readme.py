"""README.md states what the code does: its table of switches is the one envs.py defines, its table of built-in
token caps the one gate.CAPS holds."""

import pathlib
import re

from sglang_smallm_plugin import envs

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _readme_between(marker: str) -> str:
    """The README's text between its `<!-- marker:begin -->` and `<!-- marker:end -->` lines."""
    m = re.search(rf"<!-- {marker}:begin -->\n(.*?)\n<!-- {marker}:end -->", README.read_text(), re.S)
    assert m, f"README.md lost its {marker} markers"
    return m.group(1)


def test_readme_switch_table_is_envs():
    assert _readme_between("switches") == envs.markdown_table(), (
        "README's table of switches differs from sglang_smallm_plugin/envs.py: paste the output of "
        "`python -m sglang_smallm_plugin.envs` between its switches markers")


def test_switch_table_names_every_switch_once():
    table = envs.markdown_table()
    names = [sw.name for sw in envs.ALL]
    assert len(set(names)) == len(names)
    for name in names:
        assert table.count(f"| `{name}` |") == 1
    # a switch missing from envs.ALL would be missing from the table too: every Switch in the module is in ALL
    defined = [v for v in vars(envs).values() if isinstance(v, envs.Switch)]
    assert set(defined) == set(envs.ALL)


def test_readme_caps_table_is_gate_caps():
    from sglang_smallm_plugin import gate

    assert _readme_between("caps") == gate.caps_markdown_table(), (
        "README's table of built-in token caps differs from gate.CAPS: paste the output of "
        "`python -m sglang_smallm_plugin.gate` between its caps markers")


def test_caps_table_has_a_row_per_cap_in_the_gates_order():
    from sglang_smallm_plugin import gate

    rows = gate.caps_markdown_table().splitlines()[2:]
    assert len(rows) == len(gate.CAPS)
    for row, cap in zip(rows, gate.CAPS):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == cap.weight_format and cells[5] == str(cap.tokens) and cells[6] == cap.source
