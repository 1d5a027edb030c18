"""The README's recipes (examples/launch_qwen35_*_mi355x.sh, examples/measure_interactivity.sh) say what SGLang
0.5.23 accepts: each script is run with `python` and `sglang-smallm` replaced by recorders, and the command line
it would have run is parsed by SGLang's own argument parser (the server's, with the plugin loaded, and the
serving benchmark's). No server starts."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# a stand-in for `python` / `sglang-smallm`: appends its argv and the switches the recipes set to $RECORD
RECORDER = """#!/bin/sh
{python} - "$0" "$@" <<'EOF'
import json, os, sys
keys = ("SGLANG_ROCM_SMALLM_MOE", "SGLANG_USE_AITER")
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({{"prog": os.path.basename(sys.argv[1]), "argv": sys.argv[2:],
                         "env": {{k: os.environ.get(k) for k in keys}}}}) + "\\n")
EOF
"""


def _run_recipe(tmp_path, script, *args):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for prog in ("python", "sglang-smallm"):
        p = bin_dir / prog
        p.write_text(RECORDER.format(python=sys.executable))
        p.chmod(0o755)
    record = tmp_path / "record.jsonl"
    record.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_ROCM_SMALLM_MOE", "MODEL", "PORT")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", RECORD=str(record))
    r = subprocess.run(["bash", str(EXAMPLES / script), *args], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in record.read_text().splitlines()]


def _parse_all(code, argvs):
    """Runs `code` once per command line in ONE fresh interpreter (SGLang imports once): ARGV bound to each; each
    run's last stdout line as JSON, in order."""
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    loop = (f"import contextlib, io, json as _json\nCODE = {code!r}\n"
            f"for ARGV in {argvs!r}:\n"
            "    buf = io.StringIO()\n"
            "    with contextlib.redirect_stdout(buf):\n"
            "        try:\n"
            "            exec(CODE, {'ARGV': ARGV})\n"
            "        except SystemExit as e:\n"
            "            if e.code:\n"
            "                raise\n"
            "    print('PARSED ' + buf.getvalue().strip().splitlines()[-1])\n")
    r = subprocess.run([sys.executable, "-c", loop], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return [json.loads(line[len("PARSED "):]) for line in r.stdout.splitlines() if line.startswith("PARSED ")]


SERVER_PARSE = """
import argparse, json
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)
ns = p.parse_args(ARGV)
print(json.dumps({"model": ns.model_path, "tp": ns.tp_size, "backend": str(ns.moe_runner_backend), "port": ns.port,
                  "trust": ns.trust_remote_code, "max_running": ns.max_running_requests}))
"""
LAUNCHES = [(script, model, tp, mode) for script, model in (("launch_qwen35_mi355x.sh", "Qwen/Qwen3.5-397B-A17B-FP8"),
                                                            ("launch_qwen35_mxfp4_mi355x.sh", "amd/Qwen3.5-397B-A17B-MXFP4"))
            for tp in ("tp4", "tp8") for mode in ("on", "off")]


def test_launch_recipes_are_command_lines_sglang_accepts(tmp_path):
    runs = [_run_recipe(tmp_path, script, tp, mode, "--max-running-requests", "8") for script, _, tp, mode in LAUNCHES]
    launches = [calls[-1] for calls in runs]
    for launch in launches:
        assert launch["prog"] == "python" and launch["argv"][:2] == ["-m", "sglang.launch_server"], launch
    parsed = _parse_all(SERVER_PARSE, [launch["argv"][2:] for launch in launches])
    assert len(parsed) == len(LAUNCHES)
    for (script, model, tp, mode), calls, launch, ns in zip(LAUNCHES, runs, launches, parsed):
        tpn = int(tp[2:])
        assert launch["env"]["SGLANG_USE_AITER"] == "1"
        assert launch["env"]["SGLANG_ROCM_SMALLM_MOE"] == ("0" if mode == "off" else None), (script, mode)
        assert ns == {"model": model, "tp": tpn, "backend": "smallm", "port": 30000, "trust": True,
                      "max_running": 8}, (script, tp, mode, ns)  # the extra arguments reach SGLang
        doctor = [c for c in calls if c["prog"] == "sglang-smallm"]
        if script == "launch_qwen35_mi355x.sh":  # the FP8 recipe prints doctor for its shape first
            assert doctor and doctor[0]["argv"] == ["doctor", "--inter", str(1024 // tpn)], doctor


def test_launch_recipe_refuses_an_unknown_tp(tmp_path):
    r = subprocess.run(["bash", str(EXAMPLES / "launch_qwen35_mi355x.sh"), "tp3"], capture_output=True, text=True)
    assert r.returncode == 2 and "tp4 or tp8" in r.stderr


BENCH_PARSE = """
import argparse, json, sys
orig = argparse.__dict__.setdefault('_unpatched_parse_args', argparse.ArgumentParser.parse_args)  # once per process
def parse_and_stop(self, args=None, namespace=None):
    ns = orig(self, ARGV, namespace)
    print(json.dumps({k: v for k, v in vars(ns).items() if isinstance(v, (int, float, str, bool, type(None)))}))
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse_and_stop
from sglang.benchmark import serving
serving.cli_main()
"""


def test_interactivity_recipe_is_a_command_line_sglangs_benchmark_accepts(tmp_path):
    calls = _run_recipe(tmp_path, "measure_interactivity.sh", "30001")
    assert [c["argv"][:2] for c in calls] == [["-m", "sglang.benchmark.serving"]] * 2
    parsed = _parse_all(BENCH_PARSE, [c["argv"][2:] for c in calls])
    assert len(parsed) == 2
    for ns, conc in zip(parsed, (1, 4)):
        assert ns["backend"] == "sglang" and ns["port"] == 30001 and ns["max_concurrency"] == conc, ns
        assert ns["dataset_name"] == "random" and ns["num_prompts"] == 8 * conc, ns
        assert ns["random_input_len"] == 1024 and ns["random_output_len"] == 512, ns


def test_calibrate_recipe_is_a_bench_command_the_cli_takes(tmp_path, monkeypatch):
    """examples/calibrate_qwen35_mi355x.sh: the `sglang-smallm bench --write-caps` line it runs, parsed by the plugin's
    own CLI (bench.run stood in), for both TPs and formats; the default file name; its refusals."""
    from sglang_smallm_plugin import bench, cli

    for tp, fmt, name in (("tp4", "fp8", "fp8_block128"), ("tp8", "mxfp4", "mxfp4")):
        calls = _run_recipe(tmp_path, "calibrate_qwen35_mi355x.sh", tp, fmt)
        (bench_call,) = [c for c in calls if c["prog"] == "sglang-smallm"]
        assert bench_call["env"]["SGLANG_USE_AITER"] == "1"
        got = {}
        monkeypatch.setattr(bench, "run", lambda **kw: got.update(kw) or [])
        assert cli.main(bench_call["argv"]) == 0
        assert got["shapes"] == (f"qwen35-{tp}",) and got["formats"] == (name,)
        assert got["layouts"] == ("row_major", "shuffle16x16") and got["tokens"] == tuple(range(1, 65))
        assert got["write_caps"] == f"caps_qwen35_{tp}_{fmt}.json" and got["fallback"] is True
    r = subprocess.run(["bash", str(EXAMPLES / "calibrate_qwen35_mi355x.sh"), "tp8", "int4"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "fp8 or mxfp4" in r.stderr
