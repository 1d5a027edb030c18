"""Shared fixtures. One SGLang setup per test process (importing its layer modules is slow)."""

import importlib.util
import os
import pathlib
import sys

import pytest
import torch

os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # set, SGLang would import sgl_kernel and want AMX


@pytest.fixture(scope="session")
def sglang_smallm():
    """SGLang runtime context with --moe-runner-backend smallm, plugin registered (CPU)."""
    from sglang_smallm_plugin.sglang_integration import layer_harness

    layer_harness.setup("smallm")
    return layer_harness


@pytest.fixture(autouse=True)
def _kernels_env(monkeypatch):
    monkeypatch.delenv("SGLANG_ROCM_SMALLM_MOE", raising=False)
    monkeypatch.delenv("SGLANG_SMALLM_REFERENCE", raising=False)
    yield


def seeds(n=5):
    return list(range(n))


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def _sass_script(name, folder="sass"):
    """examples/FOLDER/NAME.py (a script, not part of the package) as a module."""
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def scoreboards():
    return _sass_script("scoreboards")


@pytest.fixture(scope="session")
def stage_banks():
    return _sass_script("stage_banks")


@pytest.fixture(scope="session")
def waitcnt():
    return _sass_script("waitcnt", folder="isa")


@pytest.fixture(scope="session")
def valu_per_byte():
    return _sass_script("valu_per_byte", folder="isa")


@pytest.fixture(scope="session")
def pair_step_shares(valu_per_byte):
    return _sass_script("pair_step_shares", folder="isa")
