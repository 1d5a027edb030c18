"""Shapes by name or by a D-E-K-I spec (bench and selftest take both); bad specs say why."""

import subprocess
import sys

import pytest

from sglang_smallm_plugin.shapes import SHAPES, shape_by_name


def test_registered_names_are_the_registered_shapes():
    for name, shape in SHAPES.items():
        assert shape_by_name(name) is shape


@pytest.mark.parametrize("spec,want", [
    ("D4096-E129-K5-I384-S1", (4096, 129, 5, 384, 1)),
    ("D6144-E128-K8-I256", (6144, 128, 8, 256, 0)),
    ("i128-k16-e64-d2048-s2", (2048, 64, 16, 128, 2)),  # any order, either case
])
def test_spec_gives_its_fields(spec, want):
    s = shape_by_name(spec)
    assert (s.hidden, s.experts, s.slots, s.inter, s.shared) == want
    assert s.name == spec


@pytest.mark.parametrize("spec,why", [
    ("qwen35", "unknown shape"),
    ("D4096-E129-K5", "unknown shape"),                # no I
    ("D4096-E129-K5-I384-I256", "unknown shape"),      # a field twice
    ("D4096-E129-K5-Ix", "unknown shape"),
    ("D4000-E129-K5-I384", "multiples of 128"),
    ("D4096-E129-K5-I0", "multiples of 128"),
    ("D4096-E129-K17-I384", "1 to 16 slots"),
    ("D4096-E129-K5-I384-S5", "fewer than K"),
    ("D4096-E4-K8-I384", "fewer routed experts"),
    ("D4096-E2048-K8-I384", "1 to the kernel's 1024 experts"),
    ("D4096-E128-K8-I2048", "over the kernel's 1024"),
])
def test_bad_spec_says_why(spec, why):
    with pytest.raises(ValueError, match=why):
        shape_by_name(spec)


def test_cli_refuses_a_bad_shape_before_looking_for_a_gpu():
    r = subprocess.run([sys.executable, "-m", "sglang_smallm_plugin.cli", "bench", "--shapes", "qwen35-tp4,D4096-K5"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "unknown shape 'D4096-K5'" in r.stderr and "D<hidden>-E<experts>" in r.stderr
    assert "Traceback" not in r.stderr
