"""record_to on the memory emulator: what runpod_pod and runpod_network_volume write into runs/<run_id>/state.json,
and that a pod's record survives SIGINT, both inside the create call (held off until the record is written) and
during the wait that follows (ansible-playbook interrupted like Ctrl-C in a terminal)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runpod_emulator.testing import default_signals
from runpod_integration_helpers import (
    BIN,
    MUTATING,
    PLAYBOOKS,
    ROOT,
    ansible_env,
    create_pod_directly,
    live_pods,
    recorded,
    run_playbook,
)

MODULES = "ansible_collections.trainops.gpu.plugins.modules."


def state_of(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def by_kind(state: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in state["resources"] if r["kind"] == kind]


def start_module(emulator, module: str = "runpod_pod", **args: Any) -> subprocess.Popen[str]:
    """A module run directly (as AnsiballZ would run it), its arguments on stdin; SIGINT raises
    KeyboardInterrupt in it even when this test run inherited SIGINT ignored."""
    args = {"api_url": emulator.url, "api_key": emulator.api_key, **args}
    env = dict(os.environ, PYTHONPATH=str(ROOT / "collections"))
    process = subprocess.Popen(
        [sys.executable, "-m", MODULES + module],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        preexec_fn=default_signals,
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    process.stdin.close()
    process.stdin = None
    return process


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        time.sleep(0.05)


def created_pods(emulator) -> bool:
    """Whether the emulator has answered a create with 201."""
    return any(r["method"] == "POST" and r["status"] == 201 for r in recorded(emulator))


def pod_args(name: str, state_file: Path) -> dict[str, Any]:
    return {
        "name": name,
        "image": "localhost/trainops-pod",
        "gpu_type": "NVIDIA GeForce RTX 4090",
        "wait": False,
        "record_to": str(state_file),
        "record_fields": {"role": "drill"},
    }


@pytest.mark.slow
def test_record_to_records_creates_and_the_final_state(emulator, tmp_path):
    run = run_playbook(emulator, "record_to.yml", {"runs_dir": str(tmp_path)})
    assert run.rc == 0, run.explain()
    state_file = tmp_path / "rec" / "state.json"
    state = state_of(state_file)
    assert state["run_id"] == "rec" and state["format_version"] == 1 and state["api_url"] == emulator.url

    [pod] = by_kind(state, "pod")
    assert pod["name"] == "trainops-rec-trainer" and pod["role"] == "trainer" and pod["action"] == "created"
    assert pod["status"] == "TERMINATED" and pod["final"]["status"] == "TERMINATED" and pod["final"]["source"] == "api"
    [volume] = by_kind(state, "network_volume")
    assert volume["name"] == "trainops-rec-ckpt" and volume["role"] == "ckpt" and volume["action"] == "created"
    assert pod["network_volume_id"] == volume["id"] and volume["data_center_id"] == "EU-RO-1"
    assert volume["final"]["status"] == "deleted" and volume["status"] == "deleted"
    # Check mode and the refused create recorded nothing; the key is nowhere in the file.
    assert len(state["resources"]) == 2
    assert emulator.api_key not in state_file.read_text()
    assert live_pods(emulator) == []


def test_pod_of_a_create_answered_500_is_recorded(emulator, tmp_path):
    emulator.admin("POST", "/_emulator/faults", {"kind": "500_after_create", "count": 1})
    state_file = tmp_path / "r500" / "state.json"
    process = start_module(emulator, **pod_args("trainops-r500-drill", state_file))
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    result = json.loads(out)
    assert result["reconciled"] is True
    [pod] = by_kind(state_of(state_file), "pod")
    assert pod["id"] == result["pod"]["id"] and pod["action"] == "created" and pod["role"] == "drill"
    assert [r["status"] for r in recorded(emulator) if r["method"] == "POST"] == [500]


def test_volume_of_a_create_that_got_no_answer_is_recorded(emulator, tmp_path):
    # The create answers after api_timeout: the module finds the volume by its name and records it from there.
    emulator.admin(
        "POST",
        "/_emulator/faults",
        {"kind": "latency", "latency_ms": 2000, "count": 1, "method": "POST", "path_prefix": "/v2/network-volumes"},
    )
    state_file = tmp_path / "vol" / "state.json"
    process = start_module(
        emulator,
        "runpod_network_volume",
        name="trainops-vol-ckpt",
        data_center="EU-RO-1",
        size=10,
        api_timeout=1,
        reconcile_window=5,
        record_to=str(state_file),
    )
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    result = json.loads(out)
    assert result["reconciled"] is True
    [volume] = by_kind(state_of(state_file), "network_volume")
    assert volume["id"] == result["network_volume"]["id"] and volume["action"] == "created"
    assert volume["status"] == "available" and volume["data_center_id"] == "EU-RO-1" and volume["size"] == 10


def test_sigint_inside_the_create_call_is_held_until_the_pod_is_recorded(emulator, tmp_path):
    # The create answers after 3 s; SIGINT arrives while it is in flight. Unheld, it would end the module
    # before the answer, leaving a pod that no file knows; held, it ends the module right after the record.
    emulator.admin(
        "POST",
        "/_emulator/faults",
        {"kind": "latency", "latency_ms": 3000, "count": 1, "method": "POST", "path_prefix": "/v2/pods"},
    )
    state_file = tmp_path / "held" / "state.json"
    process = start_module(emulator, **pod_args("trainops-held-drill", state_file))
    # The rule is used up when the create reaches the emulator, before its 3 s pause.
    wait_until(lambda: not emulator.admin("GET", "/_emulator/faults")["faults"], 30, "the create call")
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGINT or "KeyboardInterrupt" in err, (process.returncode, out, err)
    assert "KeyboardInterrupt" in err and '"changed"' not in out
    # The emulator makes the pod after its pause whether or not the module still listens.
    wait_until(lambda: live_pods(emulator), 10, "the pod's creation")
    [live] = live_pods(emulator)
    assert state_file.is_file(), f"pod {live['id']} exists, and no state.json records it"
    [pod] = by_kind(state_of(state_file), "pod")
    assert pod["id"] == live["id"] and pod["action"] == "created" and pod["name"] == "trainops-held-drill"


def test_sigint_during_the_wait_leaves_the_created_pod_recorded(emulator, tmp_path):
    state_file = tmp_path / "intr" / "state.json"
    command = [
        str(BIN / "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        str(PLAYBOOKS / "record_interrupted.yml"),
    ]
    command += ["-e", json.dumps({"ansible_python_interpreter": sys.executable, "state_file": str(state_file)})]
    # Its own session, so that SIGINT goes to the whole process group as Ctrl-C in a terminal does.
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=ansible_env(emulator),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,  # Ctrl-C interrupts it even when this test run inherited SIGINT ignored
    )
    try:
        wait_until(lambda: created_pods(emulator), 60, "the pod's create")
        os.killpg(process.pid, signal.SIGINT)
        out, _err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode != 0, out
    assert "PLAY RECAP" not in out  # interrupted, not finished
    [live] = live_pods(emulator)
    [pod] = by_kind(state_of(state_file), "pod")
    assert pod["id"] == live["id"] and pod["action"] == "created" and pod["role"] == "drill"
    assert pod["status"] in ("PROVISIONING", "STARTING", "RUNNING")


def test_a_teardown_that_fails_before_it_changed_anything_leaves_no_run_directory_and_no_lock(emulator, tmp_path):
    # A mistyped run id: no state.json, no pod named. The role took the run's lock before it found that out.
    runs = tmp_path / "runs"
    runs.mkdir()
    done = run_playbook(
        emulator, str(ROOT / "playbooks" / "teardown.yml"), {"teardown_run_id": "a..b", "teardown_runs_dir": str(runs)}
    )
    assert done.rc != 0, done.explain()
    assert "teardown_pod is empty and" in done.stdout and "Nothing was changed." in done.stdout, done.explain()
    assert list(runs.iterdir()) == []
    assert not any(r["method"] in MUTATING for r in recorded(emulator)), recorded(emulator)


def hold_lock(runs: Path, run_id: str, pid: int) -> None:
    """runs/<run_id>/.run.lock held by the live process `pid` of this host, as run_lock writes it for a controller."""
    start = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    owner = {"host": socket.gethostname(), "pid": pid, "start": start, "boot": boot, "play": "Smoke | train"}
    owner.update(time=int(time.time()), since="2026-12-07T00:00:00Z")
    lock = runs / run_id / ".run.lock"
    lock.mkdir(parents=True)
    (lock / "owner").write_text("".join(f"{key}={value}\n" for key, value in owner.items()))


def test_a_teardown_under_another_run_id_waits_for_the_pods_own_run_and_records_in_both(emulator, tmp_path):
    # Run runa made the pod (its name and its state.json say so) and is live (a process of this host holds its
    # lock). A teardown under run id "other" naming that pod must change nothing until runa has ended.
    runs = tmp_path / "runs"
    pod = create_pod_directly(emulator, "trainops-runa-smoke")
    emulator.api("POST", f"/v2/pods/{pod['id']}/action", {"action": "stop"})
    emulator.wait_for(pod["id"], lambda p: p["status"] == "EXITED", 30)
    (runs / "runa").mkdir(parents=True)
    record = {"kind": "pod", "id": pod["id"], "name": pod["name"], "status": "RUNNING", "action": "created"}
    document = {"format_version": 1, "run_id": "runa", "updated_at": "2026-12-07T00:00:00Z", "resources": [record]}
    (runs / "runa" / "state.json").write_text(json.dumps(document))
    extra = {
        "teardown_run_id": "other",
        "teardown_runs_dir": str(runs),
        "teardown_pod": pod["id"],
        "teardown_confirm": pod["id"],
        "teardown_allow_no_checkpoint": True,
    }
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        hold_lock(runs, "runa", holder.pid)
        emulator.admin("DELETE", "/_emulator/requests")
        refused = run_playbook(emulator, str(ROOT / "playbooks" / "teardown.yml"), extra)
        assert refused.rc != 0, refused.explain()
        text = " ".join(refused.stdout.split())
        assert (
            f"Refusing to terminate pod trainops-runa-smoke ({pod['id']}) under run other: it belongs to run runa too"
        ) in text, refused.explain()
        assert f"is held by a running ansible-playbook (host={socket.gethostname()} pid={holder.pid}" in text, text
        assert "Nothing was changed." in text
        assert not any(r["method"] in MUTATING for r in recorded(emulator)), recorded(emulator)
        assert emulator.api("GET", f"/v2/pods/{pod['id']}")[2]["status"] == "EXITED"
        assert not (runs / "other").exists() and (runs / "runa" / ".run.lock").is_dir()
    finally:
        holder.kill()
        holder.wait()
    # runa has ended (its controller is gone): its lock is taken over, the pod terminated, and both runs record it.
    done = run_playbook(emulator, str(ROOT / "playbooks" / "teardown.yml"), extra)
    assert done.rc == 0, done.explain()
    assert emulator.api("GET", f"/v2/pods/{pod['id']}")[0] == 404
    for run_id in ("runa", "other"):
        [pod_record] = [r for r in state_of(runs / run_id / "state.json")["resources"] if r["kind"] == "pod"]
        assert pod_record["id"] == pod["id"] and pod_record["final"]["status"] == "TERMINATED", (run_id, pod_record)
    assert not (runs / "runa" / ".run.lock").exists() and not (runs / "other" / ".run.lock").exists()
    evidence = json.loads((runs / "other" / "evidence" / "teardown.json").read_text())
    assert evidence["decision"] == "terminated" and evidence["pod"]["other_runs"] == ["runa"]
