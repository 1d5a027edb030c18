"""Shared fixtures. One SGLang setup per test process (importing its layer modules is slow)."""

import os

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
