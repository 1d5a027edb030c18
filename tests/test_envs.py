"""Environment switches take only the values they name (envs.Switch.accepts): anything else is refused at the
runner's startup, by the CLI's kernel commands and by setup.py, and shown by doctor, rather than read one way
here and another by the kernel launcher (which reads the A/B switches by first character or with atoi)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_smallm_plugin import cli, envs, kernels

ROOT = Path(__file__).resolve().parents[1]
BAD = {envs.BOOL: "disable", envs.ZERO_ONE: "false", envs.COUNT: "two"}


@pytest.fixture
def clean_env(monkeypatch):
    for sw in envs.ALL:
        monkeypatch.delenv(sw.name, raising=False)
    return monkeypatch


def _bad_value(sw):
    return BAD.get(sw.accepts, "3x")


def test_unset_switches_have_no_problem(clean_env):
    assert envs.problems() == []
    envs.check()


# a value list or COUNT; SGLANG_SMALLM_CAPS_FILE takes a file, whose refusals are tests/test_measured_caps.py's
@pytest.mark.parametrize("sw", [s for s in envs.ALL if s.accepts not in (None, envs.CAPS_PATH)], ids=lambda s: s.name)
def test_each_switch_refuses_a_value_it_does_not_take(clean_env, sw):
    clean_env.setenv(sw.name, _bad_value(sw))
    problem = sw.problem()
    assert problem.startswith(f"{sw.name}={_bad_value(sw)!r} is not a value it takes") and "Fix:" in problem
    with pytest.raises(ValueError, match=sw.name):
        envs.check()
    clean_env.delenv(sw.name)
    accepted = ["7", " 12 "] if sw.accepts == envs.COUNT else [a.upper() + " " for a in sw.accepts]
    for v in accepted:  # every value it takes, whatever the case and blanks around it
        clean_env.setenv(sw.name, v)
        assert sw.problem() == "", (sw.name, v)


def test_launcher_switches_mean_the_same_here_and_in_the_launcher(clean_env):
    """The 0/1 switches: on in the launcher unless the value starts with 0 (env_switch_on); here enabled().
    On every value they take the two agree (SMALLM_MMA=false would not: it is refused)."""
    for sw in [s for s in envs.ALL if s.accepts == envs.ZERO_ONE]:
        for v in sw.accepts:
            clean_env.setenv(sw.name, v)
            assert sw.enabled() == (not v.startswith("0")), (sw.name, v)
    for v in ("false", "off", "no", ""):
        clean_env.setenv("SMALLM_MMA", v)
        assert envs.MMA.problem()


def test_kernel_variant_takes_the_variants_the_launcher_runs():
    runs = {k for k, what in kernels.VARIANTS.items() if not what.startswith("removed")}
    assert set(envs.KERNEL_VARIANT.accepts) == runs


def test_kernel_commands_refuse_a_bad_switch_and_doctor_shows_it(clean_env, capsys):
    clean_env.setenv("SMALLM_DOWN_TEAMS", "3")
    for argv in (["selftest", "--what", "edge"], ["bench", "--tokens", "1"], ["demo", "--tokens", "1"]):
        with pytest.raises(SystemExit, match="SMALLM_DOWN_TEAMS='3' is not a value it takes"):
            cli.main(argv)
    assert cli.main(["doctor", "--tokens", "1"]) in (0, None)
    out = capsys.readouterr().out
    assert "NOT TAKEN: SMALLM_DOWN_TEAMS='3'" in out


def test_runner_startup_refuses_a_bad_switch(sglang_smallm, clean_env):
    from sglang_smallm_plugin.testdata import make_weights
    from sglang_smallm_plugin.shapes import MoeShape

    shape = MoeShape("small", 256, 9, 4, 128, 1)
    w = make_weights(shape, "fp8_block128", "row_major", 0, "cpu")
    clean_env.setenv("SGLANG_ROCM_SMALLM_MOE", "disable")
    with pytest.raises(ValueError, match="SGLANG_ROCM_SMALLM_MOE='disable' is not a value it takes.*Fix:"):
        sglang_smallm.build_layer(shape, "fp8_block128", w, layer_id=95)


def test_setup_py_refuses_an_unknown_build_mode(tmp_path):
    env = dict(os.environ, SGLANG_SMALLM_BUILD="maybe")
    r = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode != 0
    assert "SGLANG_SMALLM_BUILD='maybe' is not a value it takes" in (r.stderr + r.stdout)
