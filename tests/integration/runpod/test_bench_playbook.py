"""playbooks/bench.yml end to end on the emulator's podman backend: a real GPU pod (the emulated nvidia-smi
gives GPU telemetry), the source pushed by the sync role, the command run as a job, the evidence pulled, the
pod stopped and its final state read back from the API.

Three ansible-playbook runs share one emulator and one pod: a run that creates the pod and stops it, a run
that reuses it (started again) and keeps it running, a failing command (exit 3) on the same pod.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from runpod_emulator.doctor import DoctorFailure, ensure_pods_can_run
from runpod_emulator.testing import run_emulator_playbook
from runpod_integration_helpers import ROOT, EmulatorProcess, live_pods

pytestmark = [pytest.mark.podman, pytest.mark.slow]

SECRET = "bench-s3cr3t-value-42"
BENCH_PY = """\
import time
block = bytearray(96 << 20)
print("allocated", len(block), "bytes", flush=True)
time.sleep(7)
print("bench done", flush=True)
"""


class Bench:
    """One emulator, a source repository, a key and a runs directory for the playbook's runs."""

    def __init__(self, emulator: EmulatorProcess, tmp: Path):
        self.emulator = emulator
        self.src = tmp / "src"
        self.runs = tmp / "runs"
        self.key = tmp / "key" / "id_ed25519"

    def run(self, **extra_vars: Any) -> tuple[subprocess.CompletedProcess[str], Path]:
        """ansible-playbook playbooks/bench.yml with the local emulator inventory; (the run, its run dir)."""
        run_id = extra_vars.setdefault("bench_run_id", f"t{len(list(self.runs.glob('*'))) + 1}")
        extra_vars.setdefault("bench_src", str(self.src))
        extra_vars.setdefault("bench_runs_dir", str(self.runs))
        extra_vars.setdefault("bench_ssh_private_key", str(self.key))
        done = run_emulator_playbook(
            self.emulator.url,
            self.emulator.api_key,
            "bench.yml",
            extra_vars,
            timeout_s=240,
            RUNPOD_SSH_PRIVATE_KEY=str(self.key),
        )
        return done, self.runs / run_id

    def api_pod(self, pod_id: str) -> dict[str, Any]:
        status, _headers, pod = self.emulator.api("GET", f"/v2/pods/{pod_id}")
        assert status == 200, pod
        return pod


def git(src: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def report_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "bench-report.json").read_text())


def state_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "state.json").read_text())


def pod_resource(state: dict[str, Any]) -> dict[str, Any]:
    pods = [r for r in state["resources"] if r["kind"] == "pod"]
    assert len(pods) == 1, state
    return pods[0]


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"rc={done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"


def assert_no_secret(done: subprocess.CompletedProcess[str], run_dir: Path) -> None:
    assert SECRET not in done.stdout + done.stderr
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory):
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "config" / "containers.conf"))
    try:
        ensure_pods_can_run()
    except DoctorFailure as exc:
        pytest.fail(str(exc), pytrace=False)
    tmp = tmp_path_factory.mktemp("bench")
    src = tmp / "src"
    src.mkdir()
    (src / "bench.py").write_text(BENCH_PY)
    git(src, "init", "-q")
    git(src, "add", "bench.py")
    git(src, "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "commit", "-q", "-m", "bench")
    (tmp / "key").mkdir()
    with EmulatorProcess(
        backend="podman", state_dir=tmp / "emulator", extra_args=["--container-prefix", "rpbench"]
    ) as emulator:
        yield Bench(emulator, tmp)


@pytest.fixture(scope="module")
def first_run(bench: Bench):
    """A run that creates a 2-GPU pod, runs bench.py (about 7 s) and stops the pod."""
    done, run_dir = bench.run(
        bench_command="python3 bench.py",
        bench_gpu_type="NVIDIA H100 80GB HBM3",
        bench_gpu_count=2,
        bench_env={"HF_TOKEN": SECRET, "OMP_NUM_THREADS": "2"},
    )
    return done, run_dir


def test_bench_runs_a_command_end_to_end_with_evidence(bench: Bench, first_run):
    done, run_dir = first_run
    assert done.returncode == 0, explain(done)
    report = report_of(run_dir)

    assert report["source"]["commit"] == git(bench.src, "rev-parse", "HEAD")
    assert report["source"]["dirty"] is False
    assert report["result"] == report["result"] | {"exit_code": 0, "known": True, "status": "succeeded"}
    assert report["problems"] == []
    assert report["command"]["given"] == "python3 bench.py"
    assert report["env"] == {"HF_TOKEN": "<redacted>", "OMP_NUM_THREADS": "2"}

    log = Path(report["paths"]["local"]["log"])
    assert log.is_file() and "allocated 100663296 bytes" in log.read_text() and "bench done" in log.read_text()
    assert report["paths"]["remote"]["log"].endswith("/trainops/t1/job/bench/output.log")
    assert report["sync"]["pull"]["verified"] is True

    telemetry = report["telemetry"]
    assert telemetry["samples"] >= 2, telemetry
    assert 2.5 <= telemetry["spacing_s"]["median"] <= 3.5, telemetry
    assert set(telemetry["peak_gpu_memory_mib"]) == {"0", "1"}, telemetry
    assert telemetry["peak_rss_bytes"] >= 96 << 20, telemetry

    pod = report["pod"]
    assert pod["action"] == "created" and pod["gpu_type"] == "NVIDIA H100 80GB HBM3" and pod["gpu_count"] == 2
    assert [g["index"] for g in pod["gpus_seen"]] == [0, 1] and "(emulated)" in pod["gpus_seen"][0]["name"]
    assert pod["final_status"] == "EXITED"
    assert bench.api_pod(pod["id"])["status"] == "EXITED"
    state = state_of(run_dir)
    resource = pod_resource(state)
    assert resource["id"] == pod["id"] and resource["status"] == "EXITED" and resource["action"] == "created"
    # Written by runpod_pod's record_to when the create returned, then updated by run_state.
    assert resource["role"] == "bench" and resource["recorded_at"] <= resource["updated_at"] and "final" not in resource
    assert [r["kind"] for r in state["resources"]] == ["ssh_key", "pod"] and state["run_id"] == "t1"
    assert (run_dir / "bench-report.md").read_text().startswith("# Bench run t1")
    assert_no_secret(done, run_dir)


def test_bench_reuses_a_stopped_pod_and_keeps_it(bench: Bench, first_run):
    _done, first_dir = first_run
    pod_id = report_of(first_dir)["pod"]["id"]
    (bench.src / "untracked.txt").write_text("makes the tree dirty\n")
    try:
        done, run_dir = bench.run(bench_command="python3 bench.py", bench_pod=pod_id, bench_keep_pod=True)
    finally:
        (bench.src / "untracked.txt").unlink()
    assert done.returncode == 0, explain(done)
    report = report_of(run_dir)
    assert report["pod"]["id"] == pod_id and report["pod"]["action"] == "reused"
    assert report["source"]["dirty"] is True and report["source"]["archive"]["sha256"]
    assert report["result"]["exit_code"] == 0 and report["pod"]["final_status"] == "RUNNING"
    assert [p["id"] for p in live_pods(bench.emulator)] == [pod_id]
    assert bench.api_pod(pod_id)["status"] == "RUNNING"
    assert pod_resource(state_of(run_dir))["status"] == "RUNNING"


def test_bench_failing_command_fails_the_play_after_the_report(bench: Bench, first_run):
    _done, first_dir = first_run
    pod_id = report_of(first_dir)["pod"]["id"]
    done, run_dir = bench.run(bench_command="echo about to fail; exit 3", bench_pod=pod_id)
    assert done.returncode != 0, explain(done)
    report = report_of(run_dir)
    assert report["result"] == report["result"] | {"exit_code": 3, "known": True, "status": "failed"}
    assert "the command exited 3." in report["problems"]
    assert "about to fail" in Path(report["paths"]["local"]["log"]).read_text()
    assert report["pod"]["final_status"] == "EXITED" and bench.api_pod(pod_id)["status"] == "EXITED"
    assert pod_resource(state_of(run_dir))["status"] == "EXITED"
    assert [p["id"] for p in live_pods(bench.emulator)] == [pod_id]
