"""The nvidia-smi shim of emulated GPU pods, run here with bash against a gpus.conf like the emulator writes."""

from __future__ import annotations

import os
import subprocess

import pytest
from runpod_emulator.engine import SHIM


def run_shim(tmp_path, count: int, *args: str, extra_conf: str = "") -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "gpus.conf"
    conf.write_text(f"count={count}\nname=NVIDIA RTX A6000 (emulated)\nmemory_mib=49140\npod_id=abc123\n{extra_conf}")
    env = {**os.environ, "RUNPOD_EMULATOR_GPU_CONF": str(conf)}
    return subprocess.run([str(SHIM), *args], capture_output=True, text=True, env=env, timeout=30, check=False)


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        (
            "csv",
            [
                "index, name, memory.total [MiB], memory.used [MiB], utilization.gpu [%]",
                "0, NVIDIA RTX A6000 (emulated), 49140 MiB, 0 MiB, 0 %",
                "1, NVIDIA RTX A6000 (emulated), 49140 MiB, 0 MiB, 0 %",
                "2, NVIDIA RTX A6000 (emulated), 49140 MiB, 0 MiB, 0 %",
            ],
        ),
        (
            "csv,noheader",
            [f"{i}, NVIDIA RTX A6000 (emulated), 49140 MiB, 0 MiB, 0 %" for i in range(3)],
        ),
        (
            "csv,noheader,nounits",
            [f"{i}, NVIDIA RTX A6000 (emulated), 49140, 0, 0" for i in range(3)],
        ),
    ],
)
def test_query_gpu_formats(tmp_path, fmt, expected):
    result = run_shim(tmp_path, 3, "--query-gpu=index,name,memory.total,memory.used,utilization.gpu", f"--format={fmt}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected


def test_list_select_unknown_field_and_no_gpus(tmp_path):
    listed = run_shim(tmp_path, 2, "-L").stdout.splitlines()
    assert len(listed) == 2 and listed[1].startswith("GPU 1: NVIDIA RTX A6000 (emulated) (UUID: GPU-")
    one = run_shim(tmp_path, 2, "-i", "1", "--query-gpu=index,uuid", "--format=csv,noheader").stdout.splitlines()
    assert len(one) == 1 and one[0].startswith("1, GPU-") and one[0].split(", ")[1] in listed[1]
    bad = run_shim(tmp_path, 2, "--query-gpu=name,warp.speed", "--format=csv")
    assert bad.returncode == 2 and 'Field "warp.speed" is not a valid field to query.' in bad.stdout
    none = run_shim(tmp_path, 0, "--query-gpu=name", "--format=csv")
    assert none.returncode == 6 and none.stdout.strip() == "No devices were found"
    assert "NVIDIA RTX A6000 (emulated)" in run_shim(tmp_path, 1).stdout


def test_cuda_version_and_driver_follow_the_pods_host(tmp_path):
    assert "CUDA Version: 12.8" in run_shim(tmp_path, 1, extra_conf="cuda=12.8\n").stdout
    driver = run_shim(tmp_path, 1, "--query-gpu=driver_version", "--format=csv,noheader", extra_conf="cuda=12.8\n")
    assert driver.stdout.strip() == "570.124.06"
    assert "CUDA Version: 12.6" in run_shim(tmp_path, 1, extra_conf="cuda=12.6\n").stdout
