"""Token caps measured on the serving machine (`sglang-smallm bench --write-caps`, SGLANG_SMALLM_CAPS_FILE,
measured_caps.py): how a cap is derived from a bench run, the file it is written to, how the gate reads it, and how a
file that cannot be used fails the startup with the reason and the fix."""

import json

import pytest

from sglang_smallm_plugin import bench, cli, envs, gate, kernels, measured_caps, selftest
from sglang_smallm_plugin.shapes import MoeShape, shape_by_name

NAME = envs.CAPS_FILE.name


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    monkeypatch.delenv(envs.MAX_TOKENS.name, raising=False)
    measured_caps.forget()
    yield
    measured_caps.forget()


def _row(shape, fmt, layout, t, kernel, fallback=None, shipped=None):
    return dict(shape=shape, format=fmt, layout=layout, tokens=t, kernel_us=kernel, fallback_us=fallback,
                shipped_us=shipped)


def _rows(kernel, alt, shape="qwen35-tp8", fmt="fp8_block128", layout="row_major", key="fallback"):
    return [_row(shape, fmt, layout, t, k, **({key: a} if layout == "row_major" else {}))
            for t, k, a in zip((1, 2, 4, 8, 16), kernel, alt)]


def test_cap_is_the_last_count_of_the_first_faster_run():
    d, = measured_caps.derive(_rows([10, 20, 30, 40, 50], [20, 30, 35, 39, 60]))
    assert d["cap"] == 4 and not d["faster_at_last"] and d["why"] == "slower at 8 tokens (40.0 vs 39.0 us)"
    assert d["against"] == "SGLang's fallback, kernels off"
    assert d["measured"][3] == [8, 40, 39]
    # faster again at 16 does not count: the cap covers every count up to it
    d, = measured_caps.derive(_rows([10, 20, 30, 40, 50], [20, 30, 35, 45, 60]))
    assert d["cap"] == 16 and d["faster_at_last"] and "a higher cap was not looked for" in d["why"]
    d, = measured_caps.derive(_rows([10, 20, 30, 40, 50], [10, 30, 35, 45, 60]))  # level at 1 is not faster
    assert d["cap"] == 0 and d["why"].startswith("slower at 1 token (")


def test_the_alternative_is_sglang_as_shipped_where_the_bench_timed_it():
    rows = _rows([10, 20, 30, 40, 50], [20, 30, 35, 45, 60])
    for r, shipped in zip(rows, (15, 25, 25, 45, 60)):  # SGLang's own small-M kernel: faster from 4 tokens
        r["shipped_us"] = shipped
    d, = measured_caps.derive(rows)
    assert d["against"] == "SGLang as shipped" and d["cap"] == 2 and d["measured"][2] == [4, 30, 25]


def test_shuffled_rows_take_the_row_major_rows_alternative_and_need_one_token():
    rows = _rows([10, 20, 30, 40, 50], [20, 30, 35, 45, 60]) + \
        _rows([9, 19, 36, 39, 49], [0] * 5, layout="shuffle16x16")
    plain, shuffled = measured_caps.derive(rows)
    assert (plain["layout"], plain["cap"]) == ("row_major", 16)
    assert (shuffled["layout"], shuffled["cap"]) == ("shuffle16x16", 2) and shuffled["measured"][2] == [4, 36, 35]
    # no alternative time at a count (the fallback could not run there) ends the cap before it
    rows[2]["fallback_us"] = None
    assert measured_caps.derive(rows)[0]["cap"] == 2
    assert measured_caps.derive(rows)[0]["why"] == "no time for SGLang's fallback, kernels off at 4 tokens"
    d, = measured_caps.derive([r for r in _rows([10, 20, 30, 40, 50], [20, 30, 35, 45, 60]) if r["tokens"] > 1])
    assert d["cap"] == 0 and "1 token was not measured" in d["why"]


def _file(tmp_path, arch="gfx950", entries=None, **over):
    doc = dict(kind=measured_caps.KIND, version=measured_caps.VERSION, device="AMD Instinct MI355X", arch=arch,
               date="2026-12-04", command="sglang-smallm bench --write-caps caps.json", torch="2.9", sglang="0.5.23",
               entries=entries if entries is not None else [
                   dict(weight_format="mxfp4", layout="shuffle16x16", hidden=4096, inter=128, experts=513, top_k=11,
                        cap=56, against="SGLang as shipped", faster_at_last=False, measured=[[1, 9.0, 12.0]])])
    doc.update(over)
    path = tmp_path / "caps.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_gate_takes_a_measured_cap_for_exactly_its_shape(tmp_path, monkeypatch):
    builtin = gate.token_cap("gfx950", "mxfp4", 128, 11, 4096, 513, "shuffle16x16")
    assert builtin[0] == 40
    monkeypatch.setenv(NAME, _file(tmp_path))
    assert envs.problems() == []
    cap, source = gate.token_cap("gfx950", "mxfp4", 128, 11, 4096, 513, "shuffle16x16")
    assert cap == 56  # raised above the built-in 40: measured here
    assert source.startswith("measured on this machine (AMD Instinct MI355X, 2026-12-04) against SGLang as shipped")
    assert source.endswith(f"{NAME}={tmp_path / 'caps.json'}")
    # any other shape, layout, format or arch keeps the built-in caps
    for args in (("gfx950", "mxfp4", 128, 11, 4096, 129, "shuffle16x16"),
                 ("gfx950", "mxfp4", 128, 11, 4096, 513, "row_major"),
                 ("gfx950", "mxfp4", 256, 11, 4096, 513, "shuffle16x16"),
                 ("gfx950", "mxfp4", 128, 10, 4096, 513, "shuffle16x16"),
                 ("gfx950", "fp8_block128", 128, 11, 4096, 513, "shuffle16x16"),
                 ("sm_90", "mxfp4", 128, 11, 4096, 513, "shuffle16x16"),
                 ("gfx950", "mxfp4", 128, 11, 4096, None, None)):  # callers that do not give the shape
        assert "measured on this machine" not in gate.token_cap(*args)[1], args
    # SGLANG_SMALLM_MAX_TOKENS still lowers it, naming the measured cap
    monkeypatch.setenv(envs.MAX_TOKENS.name, "30")
    cap, source = gate.token_cap("gfx950", "mxfp4", 128, 11, 4096, 513, "shuffle16x16")
    assert cap == 30 and source.startswith("SGLANG_SMALLM_MAX_TOKENS=30, under the measured cap 56: measured on this")
    # the kernel's pair limit bounds it (768 pairs: 69 tokens of 11 slots)
    monkeypatch.delenv(envs.MAX_TOKENS.name)
    measured_caps.forget()
    entry = dict(weight_format="mxfp4", layout="shuffle16x16", hidden=4096, inter=128, experts=513, top_k=11, cap=500,
                 against="x")
    monkeypatch.setenv(NAME, _file(tmp_path, entries=[entry]))
    assert gate.token_cap("gfx950", "mxfp4", 128, 11, 4096, 513, "shuffle16x16")[0] == gate.MAX_PAIRS // 11


def test_shape_cap_reads_the_file_where_the_layout_is_given(tmp_path, monkeypatch):
    monkeypatch.setenv(NAME, _file(tmp_path, entries=[dict(weight_format="fp8_block128", layout="row_major",
                                                           hidden=4096, inter=128, experts=513, top_k=11, cap=12,
                                                           against="x")]))
    shape = shape_by_name("qwen35-tp8")
    assert gate.shape_cap("gfx950", "fp8_block128", shape, "row_major") == 12
    assert gate.shape_cap("gfx950", "fp8_block128", shape) == 48
    assert selftest.default_tokens(shape, "fp8_block128", "gfx950", "row_major") == [1, 3, 8, 12]


BAD_FILES = {
    "missing": (lambda p: str(p / "nope.json"), "cannot be read"),
    "not json": (lambda p: (p / "x.json").write_text("{cap: 3") and str(p / "x.json"), "not JSON"),
    "another kind": (lambda p: _file(p, kind="something else"), "not a caps file"),
    "newer version": (lambda p: _file(p, version=2), "version 2; this plugin reads version 1"),
    "no arch": (lambda p: _file(p, arch=""), "\"arch\" is missing or not text"),
    "negative cap": (lambda p: _file(p, entries=[dict(weight_format="mxfp4", layout="row_major", hidden=4096,
                                                      inter=128, experts=513, top_k=11, cap=-1, against="x")]),
                     "entry 0: \"cap\" is missing or not a whole number >= 0"),
    "text cap": (lambda p: _file(p, entries=[dict(weight_format="mxfp4", layout="row_major", hidden=4096, inter=128,
                                                  experts=513, top_k=11, cap="40", against="x")]),
                 "entry 0: \"cap\" is missing"),
    "repeated shape": (lambda p: _file(p, entries=[dict(weight_format="mxfp4", layout="row_major", hidden=4096,
                                                        inter=128, experts=513, top_k=11, cap=c, against="x")
                                                   for c in (3, 4)]), "entry 1 repeats the shape"),
}


@pytest.mark.parametrize("case", BAD_FILES, ids=list(BAD_FILES))
def test_a_file_that_cannot_be_used_is_refused_with_the_fix(tmp_path, monkeypatch, case):
    make, why = BAD_FILES[case]
    monkeypatch.setenv(NAME, make(tmp_path))
    problem = envs.CAPS_FILE.problem()
    assert problem.startswith(f"{NAME}=") and why in problem and "Fix: write it again on this machine" in problem
    with pytest.raises(ValueError, match=NAME):
        envs.check()
    with pytest.raises(SystemExit, match="Fix: write it again"):  # the CLI's kernel commands
        cli.main(["selftest", "--what", "edge"])


def test_startup_on_a_gpu_refuses_a_file_measured_on_another_arch(tmp_path, monkeypatch):
    monkeypatch.setenv(NAME, _file(tmp_path, arch="gfx950"))
    with pytest.raises(measured_caps.CapsFileError, match="measured on AMD Instinct MI355X \\(gfx950\\), but this "
                                                          "device is sm_90.*Fix:"):
        measured_caps.check_device("sm_90")
    note = measured_caps.check_device("gfx950")
    assert note.startswith(f"token caps from {tmp_path / 'caps.json'} (measured on AMD Instinct MI355X, gfx950, "
                           "2026-12-04): mxfp4 shuffle16x16 D=4096 I=128 E=513 K=11: cap 56; other shapes keep")
    monkeypatch.delenv(NAME)
    assert measured_caps.check_device("sm_90") == ""


def test_sglang_layer_startup_refuses_a_bad_or_foreign_caps_file(sglang_smallm, tmp_path, monkeypatch):
    """Through SGLang's own FusedMoE with --moe-runner-backend smallm: a caps file the plugin cannot read fails
    the layer's construction (envs.check), and on a GPU so does one measured on another arch."""
    import torch

    from sglang_smallm_plugin import runner as runner_mod
    from sglang_smallm_plugin.testdata import make_weights

    shape = MoeShape("small", 256, 9, 4, 128, 1)
    w = make_weights(shape, "fp8_block128", "row_major", 0, "cpu")
    monkeypatch.setenv(NAME, str(tmp_path / "absent.json"))
    with pytest.raises(ValueError, match="absent.json: cannot be read.*Fix:"):
        sglang_smallm.build_layer(shape, "fp8_block128", w, layer_id=300)
    monkeypatch.setenv(NAME, _file(tmp_path, arch="gfx950"))
    sglang_smallm.build_layer(shape, "fp8_block128", w, layer_id=301)  # CPU: no caps apply, the file reads
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(kernels, "device_info", lambda device=None: kernels.DeviceInfo("cuda", "H200", "sm_90"))
    monkeypatch.setattr(runner_mod.MoeSelector, "availability",
                        lambda self, device: [("smallm-compiled", True, "sm_90a")])
    with pytest.raises(ValueError, match="measured on AMD Instinct MI355X \\(gfx950\\), but this device is sm_90"):
        sglang_smallm.build_layer(shape, "fp8_block128", w, layer_id=302)


def test_bench_write_caps_checks_then_writes(tmp_path, monkeypatch):
    """bench --write-caps on one run's rows: every count up to a cap checked by the selftest, then the file,
    which the gate reads back; a failed check writes nothing."""
    rows = _rows([10, 20, 30, 40, 50], [20, 30, 35, 39, 60]) + _rows([5, 6, 7, 8, 9], [6, 7, 8, 9, 10],
                                                                      shape="qwen35-tp4", fmt="mxfp4")
    meta = dict(device="AMD Instinct MI355X", arch="gfx950", date="2026-12-04", torch="2.9")
    checked = []

    def fake_run(formats, shapes, layouts, seeds, tokens, echo):
        checked.append((formats, shapes, layouts, tuple(seeds), tuple(tokens)))
        return [selftest.CaseResult(shapes[0], formats[0], layouts[0], t, s, 1e-4, True, True, True, 1e-3)
                for t in tokens for s in seeds]

    monkeypatch.setattr(selftest, "run", fake_run)
    path = tmp_path / "caps.json"
    lines = []
    bench.write_measured_caps(rows, str(path), meta, ("qwen35-tp8", "qwen35-tp4"), echo=lines.append)
    assert checked == [(("fp8_block128",), ("qwen35-tp8",), ("row_major",), (0, 1), (1, 2, 4)),
                       (("mxfp4",), ("qwen35-tp4",), ("row_major",), (0, 1), (1, 2, 4, 8, 16))]
    doc = json.loads(path.read_text())
    assert doc["arch"] == "gfx950" and doc["command"].startswith("sglang-smallm") and doc["sglang"]
    assert [(e["inter"], e["cap"]) for e in doc["entries"]] == [(128, 4), (256, 16)]
    # the built-in cap beside each measured one (gfx950: FP8 at I = 128 48, MXFP4 at I = 256 40)
    assert "| qwen35-tp8 | fp8_block128 | row_major | 4 | 48 | SGLang's fallback, kernels off | 1,2,4 | slower at 8" \
        in "\n".join(lines)
    assert "| qwen35-tp4 | mxfp4 | row_major | 16 | 40 | SGLang's fallback, kernels off | 1,2,4,8,16 | faster at" \
        in "\n".join(lines)
    monkeypatch.setenv(NAME, str(path))
    assert gate.token_cap("gfx950", "fp8_block128", 128, 11, 4096, 513, "row_major")[0] == 4
    assert gate.token_cap("gfx950", "mxfp4", 256, 11, 4096, 513, "row_major")[0] == 16

    def failing_run(formats, shapes, layouts, seeds, tokens, echo):
        return [selftest.CaseResult(shapes[0], formats[0], layouts[0], t, 0, 2e-3 if t == 4 else 1e-4, True, True,
                                    True, 1e-3) for t in tokens]

    monkeypatch.setattr(selftest, "run", failing_run)
    other = tmp_path / "other.json"
    with pytest.raises(SystemExit, match="failed the selftest's check for qwen35-tp8 fp8_block128 row_major at "
                                         "\\[1, 2, 4\\] tokens: .*other.json was not written"):
        bench.write_measured_caps(rows, str(other), meta, ("qwen35-tp8", "qwen35-tp4"), echo=lines.append)
    assert not other.exists()


def test_a_shape_whose_alternative_never_ran_gets_no_entry(tmp_path, monkeypatch):
    """MXFP4 on CUDA: SGLang's Quark scheme does not run there, so the bench has no fallback time; that is no
    finding, and writing cap 0 would turn the kernel off for the shape. The built-in cap stays."""
    rows = _rows([10, 20, 30, 40, 50], [20, 30, 35, 39, 60]) + _rows([5, 6, 7, 8, 9], [None] * 5, fmt="mxfp4")
    monkeypatch.setattr(selftest, "run", lambda formats, shapes, layouts, seeds, tokens, echo: [
        selftest.CaseResult(shapes[0], formats[0], layouts[0], t, 0, 1e-4, True, True, True, 1e-3) for t in tokens])
    lines = []
    path = tmp_path / "caps.json"
    derived = bench.write_measured_caps(rows, str(path), dict(device="H200", arch="sm_90", date="2026-12-04",
                                                              torch="2.9"), ("qwen35-tp8",), echo=lines.append)
    assert [d["written"] for d in derived] == [True, False]
    assert [e["weight_format"] for e in json.loads(path.read_text())["entries"]] == ["fp8_block128"]
    assert "| qwen35-tp8 | mxfp4 | row_major | not written (built-in cap kept) | 48 |" in "\n".join(lines)
    assert "no time for SGLang's fallback, kernels off at 1 token" in "\n".join(lines)
    # nothing timed at all (SGLang not importable, say): no file, and why
    empty = tmp_path / "empty.json"
    with pytest.raises(SystemExit, match="could not be timed for any shape of this run \\(qwen35-tp8 mxfp4 row_major: "
                                         "no time for .*empty.json was not written"):
        bench.write_measured_caps(rows[5:], str(empty), dict(device="H200", arch="sm_90", date="2026-12-04",
                                                             torch="2.9"), ("qwen35-tp8",), echo=lines.append)
    assert not empty.exists()


@pytest.mark.parametrize("argv, why", [
    (["--layouts", "shuffle16x16"], "needs row_major among --layouts"),
    (["--tokens", "2,4"], "needs 1 among --tokens"),
    (["--no-fallback"], "drop --no-fallback"),
])
def test_bench_write_caps_refuses_a_run_it_cannot_derive_caps_from(tmp_path, argv, why):
    with pytest.raises(SystemExit, match=why):
        cli.main(["bench", "--write-caps", str(tmp_path / "c.json"), *argv])


def test_doctor_shows_the_measured_caps(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(NAME, _file(tmp_path))
    assert cli.main(["doctor", "--arch", "gfx950", "--format", "mxfp4", "--inter", "128", "--tokens", "56,57"]) in (0, 1)
    out = capsys.readouterr().out
    assert "measured caps" in out and "mxfp4 shuffle16x16 D=4096 I=128 E=513 K=11: cap 56" in out
    assert "token cap                    56 (measured on this machine" in out
    assert "tokens=56                    kernel" in out and "tokens=57                    fallback  tokens: 57 tokens > " \
        "cap 56 (measured on this machine" in out


def test_doctor_on_a_gpu_of_another_arch_says_the_file_is_not_usable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(NAME, _file(tmp_path, arch="gfx950"))
    monkeypatch.setattr(kernels, "device_info", lambda device=None: kernels.DeviceInfo("cuda", "H200", "sm_90"))
    cli.main(["doctor", "--tokens", "1"])
    out = capsys.readouterr().out
    assert "(NOT USABLE HERE: measured on gfx950, this device is sm_90; the server refuses it)" in out
    assert "token cap                    30 (H200 vs SGLang's layer" in out  # the built-in cap decides the table
