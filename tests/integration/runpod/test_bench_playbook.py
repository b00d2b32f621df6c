"""playbooks/bench.yml end to end on the emulator's podman backend: a real GPU pod (the emulated nvidia-smi
gives GPU telemetry), the source pushed by the sync role, the command run as a job, the evidence pulled, the
pod stopped and its final state read back from the API.

Three ansible-playbook runs share one emulator and one pod: a run that creates the pod and stops it, a run
that reuses it (started again) and keeps it running, a failing command (exit 3) on the same pod. Three more
reuse a network volume made through the API beforehand: by name (a file written on it), by id on a second pod
(the file read back), and a volume name that does not exist (nothing created).
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
from runpod_integration_helpers import MUTATING, ROOT, EmulatorProcess, live_pods, recorded

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
    assert pod["final_status"] == "EXITED" and pod["network_volume"] is None and report["network_volume"] is None
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


def test_bench_stops_a_command_at_the_time_limit_and_reports_it(bench: Bench, first_run):
    # The wait is the train role's bounded until: loop; past bench_time_limit_s the command gets SIGTERM.
    _done, first_dir = first_run
    pod_id = report_of(first_dir)["pod"]["id"]
    command = "echo started; sleep 120; echo never"
    done, run_dir = bench.run(bench_command=command, bench_pod=pod_id, bench_time_limit_s=6, bench_wait_chunk_s=2,
                              bench_stop_grace_s=2)  # fmt: skip
    assert done.returncode != 0, explain(done)
    report = report_of(run_dir)
    assert report["result"]["status"] == "timed_out" and report["result"]["timed_out"] is True, report["result"]
    assert "the command ran past bench_time_limit_s (6 s) and was stopped." in report["problems"]
    assert report["result"]["wall_s"] is not None and 5 <= report["result"]["wall_s"] <= 30, report["result"]
    log = Path(report["paths"]["local"]["log"]).read_text()
    assert "started" in log and "never" not in log
    assert report["pod"]["final_status"] == "EXITED" and bench.api_pod(pod_id)["status"] == "EXITED"


def test_bench_stops_a_pod_that_stops_answering_and_reports_what_it_bills(bench: Bench, first_run):
    # The command kills every sshd of its pod (the listener and Ansible's sessions) while the wait runs: the pod
    # is dropped from its play at that task, and the last play still stops it, reports and records it.
    _done, first_dir = first_run
    pod_id = report_of(first_dir)["pod"]["id"]
    command = "echo started; sleep 3; pkill -KILL -x sshd; sleep 100"
    done, run_dir = bench.run(bench_command=command, bench_pod=pod_id, bench_time_limit_s=120, bench_wait_chunk_s=5)
    assert done.returncode != 0, explain(done)
    report = report_of(run_dir)
    assert report["pod"]["unreachable"] == {"step": "run"}, report["pod"]
    assert f"pod {pod_id} stopped answering (unreachable) during the step run." in report["problems"], report
    billing = report["pod"]["left_billing"]
    assert billing["status"] == "EXITED" and billing["bills"] == "storage" and billing["cost_per_hour"] > 0, billing
    assert report["pod"]["final_status"] == "EXITED" and bench.api_pod(pod_id)["status"] == "EXITED"
    assert billing["sentence"].replace("pod", "Pod", 1) in " ".join(done.stdout.split()), explain(done)
    assert "left billing | " + billing["sentence"] in (run_dir / "bench-report.md").read_text()
    recorded = state_of(run_dir)["bench"]
    assert recorded["result"] == "failed" and recorded["unreachable"] == {"step": "run"}, recorded
    assert recorded["left_billing"] == billing
    assert not (run_dir / ".run.lock").exists()


# The network volume tests run last: their pods are terminated, so the tests above see only their own pod.
VOLUME_NAME = "bench-data"
# EU-SE-1 has RTX 4090s (bench's default GPU) but is not where a pod without a volume is placed (EU-RO-1).
VOLUME_DATA_CENTER = "EU-SE-1"


@pytest.fixture(scope="module")
def volume(bench: Bench) -> dict[str, Any]:
    """A network volume made through the API before any run, as an operator would."""
    body = {"name": VOLUME_NAME, "size": 10, "dataCenter": VOLUME_DATA_CENTER}
    status, _headers, created = bench.emulator.api("POST", "/v2/network-volumes", body)
    assert status == 201, created
    return created


def api_volumes(bench: Bench) -> list[dict[str, Any]]:
    status, _headers, body = bench.emulator.api("GET", "/v2/network-volumes")
    assert status == 200, body
    return body["networkVolumes"]


def test_bench_mounts_an_existing_network_volume_and_leaves_it(bench: Bench, volume):
    # By name: the command writes a file into the run directory on the volume (<durable>/trainops/vol1/).
    done, run_dir = bench.run(
        bench_run_id="vol1",
        bench_command="echo written-by-vol1 > ../marker.txt && cat ../marker.txt",
        bench_network_volume=VOLUME_NAME,
    )
    assert done.returncode == 0, explain(done)
    report = report_of(run_dir)
    pod_id = report["pod"]["id"]
    assert report["pod"]["action"] == "created" and report["problems"] == []
    assert report["network_volume"] == report["network_volume"] | {
        "id": volume["id"],
        "name": VOLUME_NAME,
        "data_center_id": VOLUME_DATA_CENTER,
        "action": "reused",
    }
    assert report["pod"]["network_volume"] == {"id": volume["id"], "path": "/workspace"}
    assert report["pod"]["durable_root"] == "/workspace" and report["pod"]["data_center_id"] == VOLUME_DATA_CENTER
    assert "written-by-vol1" in Path(report["paths"]["local"]["log"]).read_text()
    markdown = (run_dir / "bench-report.md").read_text()
    assert f"| network volume | {volume['id']} `{VOLUME_NAME}` (reused), mounted at /workspace |" in markdown, markdown
    pod = bench.api_pod(pod_id)
    assert pod["mounts"]["network"] == [{"volumeId": volume["id"], "path": "/workspace"}], pod
    assert "persistent" not in pod["mounts"] or not pod["mounts"]["persistent"], pod
    assert pod["dataCenterId"] == VOLUME_DATA_CENTER and pod["status"] == "EXITED"
    # state.json records the volume as reused (nothing for a clean-up to delete) and the pod on it.
    state = state_of(run_dir)
    assert [r["kind"] for r in state["resources"]] == ["network_volume", "ssh_key", "pod"]
    [recorded_volume] = [r for r in state["resources"] if r["kind"] == "network_volume"]
    assert recorded_volume["id"] == volume["id"] and recorded_volume["action"] == "reused"
    assert pod_resource(state)["network_volume_id"] == volume["id"]
    assert api_volumes(bench) == [volume]

    # The pod goes (terminated through the API); the volume and the file on it stay.
    assert bench.emulator.api("DELETE", f"/v2/pods/{pod_id}")[0] == 204
    assert bench.emulator.api("GET", f"/v2/pods/{pod_id}")[0] == 404
    assert api_volumes(bench) == [volume]

    # By id, on a second pod that this run terminates at the end: the file written on the first pod is there.
    done, run_dir = bench.run(
        bench_run_id="vol2",
        bench_command="cat ../../vol1/marker.txt",
        bench_network_volume=volume["id"],
        bench_terminate="trainops-vol2-bench",
    )
    assert done.returncode == 0, explain(done)
    report = report_of(run_dir)
    assert report["pod"]["id"] != pod_id and report["pod"]["action"] == "created" and report["problems"] == []
    assert report["network_volume"]["id"] == volume["id"] and report["network_volume"]["action"] == "reused"
    assert report["pod"]["network_volume"] == {"id": volume["id"], "path": "/workspace"}
    assert report["pod"]["final_status"] == "TERMINATED"
    assert "written-by-vol1" in Path(report["paths"]["local"]["log"]).read_text()
    state = state_of(run_dir)
    assert [(r["kind"], r["action"]) for r in state["resources"]] == [
        ("network_volume", "reused"),
        ("ssh_key", "reused"),
        ("pod", "created"),
    ]
    assert pod_resource(state)["network_volume_id"] == volume["id"]
    assert api_volumes(bench) == [volume]
    assert report["pod"]["id"] not in [p["id"] for p in live_pods(bench.emulator)]


def test_bench_unknown_network_volume_fails_before_anything_is_created(bench: Bench, volume):
    pods_before = [p["id"] for p in live_pods(bench.emulator)]
    bench.emulator.admin("DELETE", "/_emulator/requests")
    done, run_dir = bench.run(bench_run_id="volbad", bench_command="true", bench_network_volume="no-such-volume")
    assert done.returncode != 0, explain(done)
    message = "bench_network_volume no-such-volume: no network volume has this name or id. Nothing was created."
    assert message in done.stdout, explain(done)
    report = report_of(run_dir)
    assert report["problems"][0] == (
        f'provisioning failed at "Check that bench_network_volume names one volume": {message}'
    )
    assert report["pod"]["id"] is None and report["network_volume"] is None
    assert state_of(run_dir)["resources"] == []
    mutating = [(r["method"], r["path"]) for r in recorded(bench.emulator) if r["method"] in MUTATING]
    assert mutating == []
    assert [p["id"] for p in live_pods(bench.emulator)] == pods_before and api_volumes(bench) == [volume]
