"""playbooks/smoke.yml interrupted and raced on the emulator's podman backend: real pods, real SSH, real rsync.

In file order, on one emulator:

- Ctrl-C (SIGINT to the playbook's process group, as a terminal sends it) while the sync push runs leaves the
  run's lock behind, owned by an ansible-playbook that is gone; an immediate rerun takes it over and passes.
- Two smoke runs with one run id at once: the second fails at its start naming the holder and changes nothing,
  and so does a teardown under another run id naming the first one's pod; the first trains to its last step in
  one life (no interruption, no second job) and stops its pod.
- Teardown by run id alone finds that stopped pod (state.json records it EXITED) and terminates it.
- sshd killed inside the pod while it trains: the pod is dropped from the play at that task, the last play still
  stops it and records "unreachable" with the step it was in and what it still bills; the playbook fails naming
  the pod. Then a teardown under another run id terminates that pod, recorded in both runs' state.json.
- The source moved away while the pod bootstraps: the sync role's check of it (run_once) fails on the pod, which
  fails every host of the play, localhost too; the last play still stops the pod and records the failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runpod_emulator.testing import EmulatorProcess, ansible_env, ctrl_c, kill_sshd

pytestmark = [pytest.mark.podman, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PUSH_TASK = "Sync | record, push and verify the source"
TRAIN_WAIT_TASK = "Train | wait"


class Smoke:
    """One podman emulator, a HOME with the controller's SSH key, and a runs directory."""

    def __init__(self, emulator: EmulatorProcess, tmp: Path):
        self.emulator = emulator
        self.tmp = tmp
        self.home = tmp / "home"
        self.runs = tmp / "runs"
        self.logs = tmp / "logs"
        for directory in (self.home, self.runs, self.logs):
            directory.mkdir()

    def start(self, name: str, **extra_vars: Any) -> tuple[subprocess.Popen, Path]:
        """ansible-playbook playbooks/smoke.yml in its own process group, as a shell runs a foreground job, with
        SIGINT at its default disposition whatever this test process inherited (nohup, `&`)."""
        variables = {"smoke_runs_dir": str(self.runs), **extra_vars}
        env = ansible_env(self.emulator.url, self.emulator.api_key, HOME=str(self.home))
        command = [str(BIN / "ansible-playbook"), "-i", "inventories/local.runpod.yml", "playbooks/smoke.yml"]
        log = self.logs / f"{name}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [*command, "-e", json.dumps(variables)],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                process_group=0,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        return process, log

    def run(self, name: str, timeout: float = 300, **extra_vars: Any) -> tuple[int, str]:
        process, log = self.start(name, **extra_vars)
        return finish(process, timeout), log.read_text()

    def teardown(self, variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """ansible-playbook playbooks/teardown.yml on this runs directory, to its end (bounded)."""
        env = ansible_env(self.emulator.url, self.emulator.api_key, HOME=str(self.home))
        variables = {"teardown_runs_dir": str(self.runs), **variables}
        command = [str(BIN / "ansible-playbook"), "playbooks/teardown.yml", "-e", json.dumps(variables)]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)

    def state(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.runs / run_id / "state.json").read_text())

    def pod(self, pod_id: str) -> dict[str, Any] | None:
        status, _headers, body = self.emulator.api("GET", f"/v2/pods/{pod_id}")
        return body if status == 200 else None


def reap(process: subprocess.Popen) -> None:
    """SIGKILL to the playbook's process group when it still runs (a test that failed on the way)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def finish(process: subprocess.Popen, timeout: float) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        reap(process)
        raise


def wait_for_line(log: Path, marker: str, process: subprocess.Popen, timeout: float) -> None:
    """Until the playbook prints `marker` (bounded); fails if it ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker in log.read_text():
            return
        if process.poll() is not None:
            pytest.fail(f"the playbook ended (rc {process.returncode}) before {marker!r}:\n{log.read_text()[-4000:]}")
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    pytest.fail(f"no {marker!r} within {timeout} s:\n{log.read_text()[-4000:]}")


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace('\\"', '"').replace("\\n", " "))


def pods_of(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in state["resources"] if r["kind"] == "pod"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory, pod_image: str):
    # pod_image (conftest.py): podman, SSH and the local pod image work, or the module fails naming what does not.
    tmp = tmp_path_factory.mktemp("smokeint")
    with EmulatorProcess(
        backend="podman", state_dir=tmp / "emulator", extra_args=["--container-prefix", "rpsint"]
    ) as emulator:
        yield Smoke(emulator, tmp)


def test_ctrl_c_during_the_sync_push_then_an_immediate_rerun_passes(smoke: Smoke):
    run_id = "intr-1"
    process, log = smoke.start("interrupted", smoke_run_id=run_id)
    wait_for_line(log, PUSH_TASK, process, timeout=240)
    ctrl_c(process)
    rc = finish(process, timeout=60)
    printed = log.read_text()
    assert rc != 0, printed[-4000:]
    # The interrupted playbook is gone and its lock is left behind: the case the rerun must handle.
    owner = (smoke.runs / run_id / ".run.lock" / "owner").read_text()
    assert f"pid={process.pid}\n" in owner, owner

    rc, printed = smoke.run("rerun", smoke_run_id=run_id)
    assert rc == 0, printed[-6000:]
    text = one_line(printed)
    assert "took over the lock of a controller that is gone (host=" in text and f"pid={process.pid} " in text, text
    assert f"Smoke run {run_id} passed" in text, printed[-4000:]
    pods = pods_of(smoke.state(run_id))
    assert len(pods) == 1 and pods[0]["final"]["status"] == "TERMINATED", pods
    assert not (smoke.runs / run_id / ".run.lock").exists()


def test_a_second_run_with_the_same_run_id_leaves_the_first_ones_training_untouched(smoke: Smoke):
    run_id = "conc-1"
    steps = 30000  # about 45 s of the reference trainer: the second run and the teardown start and end within it
    first, first_log = smoke.start(
        "first", smoke_run_id=run_id, smoke_train_steps=steps, smoke_checkpoint_every=5000, smoke_teardown="stop"
    )
    try:
        wait_for_line(first_log, TRAIN_WAIT_TASK, first, timeout=240)
        pod_id = pods_of(smoke.state(run_id))[0]["id"]
        state_before = (smoke.runs / run_id / "state.json").read_text()

        rc, printed = smoke.run("second", timeout=120, smoke_run_id=run_id, smoke_train_steps=steps)
        text = one_line(printed)
        assert rc != 0, printed[-4000:]
        assert f"run {run_id}: " in text and "is held by a running ansible-playbook (host=" in text, printed[-4000:]
        assert f"pid={first.pid} " in text, text
        # The second run changed nothing: the first one's pod runs, its state.json is as it was.
        assert smoke.pod(pod_id)["status"] == "RUNNING"
        assert first.poll() is None, first_log.read_text()[-4000:]
        assert (smoke.runs / run_id / "state.json").read_text() == state_before

        # A teardown under another run id naming the first run's pod is refused while that run holds its lock.
        done = smoke.teardown({"teardown_run_id": "other", "teardown_pod": pod_id, "teardown_confirm": pod_id,
                               "teardown_allow_no_known_checkpoint": True})  # fmt: skip
        text = one_line(done.stdout + done.stderr)
        assert done.returncode != 0, text[-4000:]
        refusal = f"Refusing to terminate pod trainops-{run_id}-smoke ({pod_id}) under run other: it belongs to run"
        assert refusal in text, text[-4000:]
        assert f"pid={first.pid} " in text and "Nothing was changed." in text, text[-4000:]
        assert smoke.pod(pod_id)["status"] != "TERMINATED" and not (smoke.runs / "other").exists()

        rc = finish(first, timeout=400)
    finally:
        reap(first)
    printed = first_log.read_text()
    assert rc == 0, printed[-6000:]
    assert f"Smoke run {run_id} passed" in one_line(printed), printed[-4000:]
    state = smoke.state(run_id)
    assert state["smoke"]["checkpoint"]["step"] == steps, state["smoke"]
    # One life of the trainer: started once, never interrupted, finished at its last step.
    events = [json.loads(line) for line in (smoke.runs / run_id / "logs" / "events.jsonl").read_text().splitlines()]
    lives = [(e["event"], e.get("status")) for e in events if e["event"] in ("start", "exit")]
    assert lives == [("start", None), ("exit", "finished")], lives
    result = json.loads((smoke.runs / run_id / "logs" / "result.json").read_text())
    assert result["status"] == "finished" and result["step"] == steps, result
    pods = pods_of(state)
    assert len(pods) == 1 and pods[0]["status"] == "EXITED", pods


def test_teardown_by_run_id_alone_removes_the_stopped_pod(smoke: Smoke):
    run_id = "conc-1"
    pods = pods_of(smoke.state(run_id))
    assert len(pods) == 1 and smoke.pod(pods[0]["id"])["status"] == "EXITED", pods
    pod = pods[0]
    done = smoke.teardown({"teardown_run_id": run_id, "teardown_confirm": pod["name"], "teardown_start_stopped": True})
    text = one_line(done.stdout + done.stderr)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert f"Terminated pod {pod['name']} ({pod['id']}) of run {run_id}" in text, text[-4000:]
    assert smoke.pod(pod["id"]) is None or smoke.pod(pod["id"])["status"] == "TERMINATED"
    recorded = pods_of(smoke.state(run_id))
    assert recorded[0]["final"]["status"] == "TERMINATED", recorded


def test_sshd_killed_while_training_stops_the_pod_and_records_unreachable(smoke: Smoke):
    run_id = "lost-1"
    process, log = smoke.start("lost", smoke_run_id=run_id, smoke_train_steps=40000, smoke_checkpoint_every=10000)
    try:
        wait_for_line(log, TRAIN_WAIT_TASK, process, timeout=240)
        pod_id = pods_of(smoke.state(run_id))[0]["id"]
        kill_sshd(f"rpsint-{pod_id}")
        rc = finish(process, timeout=240)
    finally:
        reap(process)
    printed = log.read_text()
    text = one_line(printed)
    assert rc != 0, printed[-6000:]
    assert f"Smoke run {run_id} failed: pod {pod_id} (" in text, printed[-4000:]
    assert "stopped answering (unreachable) during the step train" in text, printed[-4000:]
    assert f"Pod {pod_id} is EXITED: it bills its 20 GB volume disk, " in text, printed[-4000:]
    # Stopped through the API, recorded with the step it was in and what it still bills.
    assert smoke.pod(pod_id)["status"] == "EXITED"
    listed = smoke.emulator.api("GET", "/v2/pods")[2]["pods"]
    assert not [p for p in listed if p["status"] == "RUNNING" and run_id in p["name"]], listed
    state = smoke.state(run_id)
    assert state["smoke"]["result"] == "failed" and state["smoke"]["unreachable"]["step"] == "train", state["smoke"]
    assert state["smoke"]["left_billing"]["bills"] == "storage", state["smoke"]
    assert state["smoke"]["left_billing"]["cost_per_hour"] > 0, state["smoke"]
    assert state["smoke"]["pod"]["final_status"] == "EXITED"
    assert pods_of(state)[0]["final"]["status"] == "EXITED"
    assert not (smoke.runs / run_id / ".run.lock").exists()

    # That run has ended: a teardown under another run id naming its pod terminates it, recorded in both runs.
    done = smoke.teardown({"teardown_run_id": "lost-td", "teardown_pod": pod_id, "teardown_confirm": pod_id,
                           "teardown_allow_no_known_checkpoint": True})  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert smoke.pod(pod_id) is None or smoke.pod(pod_id)["status"] == "TERMINATED"
    for run in (run_id, "lost-td"):
        (recorded,) = pods_of(smoke.state(run))
        assert recorded["id"] == pod_id and recorded["final"]["status"] == "TERMINATED", (run, recorded)


def test_a_run_once_failure_on_the_pod_still_stops_and_records_it(smoke: Smoke):
    # The source moved away while the pod bootstraps: the sync role's check of it (run_once) fails on the pod,
    # and a failed run_once task fails every host of the play, localhost too. The pod's rescue records it.
    run_id = "moved-1"
    src = smoke.tmp / "moved-src"
    shutil.copytree(ROOT / "training", src / "training", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "src"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    process, log = smoke.start("moved", smoke_run_id=run_id, smoke_src=str(src))
    try:
        wait_for_line(log, "Smoke | Step bootstrap", process, timeout=240)
        src.rename(src.with_name("moved-src.away"))
        rc = finish(process, timeout=240)
    finally:
        reap(process)
    printed = log.read_text()
    assert rc != 0, printed[-6000:]
    (pod,) = pods_of(smoke.state(run_id))
    assert smoke.pod(pod["id"])["status"] == "EXITED", printed[-4000:]
    state = smoke.state(run_id)["smoke"]
    assert state["result"] == "failed" and state["unreachable"] is None, state
    failed_task = "Sync | fail unless the source is a directory on the controller"
    assert state["problem"].startswith(f'"{failed_task}" failed: '), state
    assert f"Smoke run {run_id} failed: " in one_line(printed), printed[-4000:]
    assert not (smoke.runs / run_id / ".run.lock").exists()
