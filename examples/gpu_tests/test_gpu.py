"""Example GPU tests for examples/gpu-tests.yml. Tests that need CUDA skip without it."""

import shutil
import subprocess

import pytest

HAS_GPU = shutil.which("nvidia-smi") is not None


def test_python_works() -> None:
    assert sum(range(10)) == 45


@pytest.mark.skipif(not HAS_GPU, reason="no NVIDIA GPU on this machine")
def test_nvidia_smi_lists_a_gpu() -> None:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)
    assert "GPU 0" in out.stdout


@pytest.mark.skipif(not HAS_GPU, reason="no NVIDIA GPU on this machine")
def test_multi_gpu_visible() -> None:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)
    assert out.stdout.count("GPU ") >= 2
