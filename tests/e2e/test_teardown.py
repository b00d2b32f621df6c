"""playbooks/teardown.yml (the teardown role's gate) end to end on the emulator's podman backend: real pods,
reached over SSH, with real checkpoints of the reference trainer on their durable roots, and the pulled copies
on the controller verified by loading them with torch.

One pod with a persistent volume serves these tests, in file order: refused without any checkpoint (and
without confirmation), refused while the pod's newest checkpoint is not on the controller (and the confirmation
names another pod), refused with a corrupt pulled copy, nothing deleted in check mode, deleted when everything
holds (final state read back and recorded), and a second run that changes nothing. A second pod, whose durable
root is a network volume, is stopped, then started by the role (teardown_start_stopped) and terminated with
nothing pulled: its newest checkpoint is loaded on the pod, and the volume outlives it. A third pod, stopped with
both checkpoints on its volume disk and only the older one pulled, is terminated unread under the deprecated
teardown_allow_no_checkpoint: the message says what went with it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from runpod_emulator.testing import EmulatorProcess, ansible_env

pytestmark = [pytest.mark.podman, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUN_ID = "td1"
POD_NAME = f"trainops-{RUN_ID}-train"
POD_CKPT = f"/workspace/trainops/{RUN_ID}/ckpt"
NEWEST = "step-00000004"
OLDER = "step-00000002"
MUTATING = ("POST", "PUT", "PATCH", "DELETE")
VOLUME_RUN_ID = "td2"
VOLUME_NAME = f"trainops-{VOLUME_RUN_ID}-data"
VOLUME_POD_NAME = f"trainops-{VOLUME_RUN_ID}-train"


class Teardown:
    """One emulator, one running pod with a persistent volume, a trained run and a runs directory."""

    def __init__(self, emulator: EmulatorProcess, tmp: Path, pod: dict[str, Any]):
        self.emulator = emulator
        self.tmp = tmp
        self.pod = pod
        self.runs = tmp / "runs"
        self.run_dir = self.runs / RUN_ID
        self.key = tmp / "id_ed25519"
        self.trained = tmp / "trained" / "ckpt"
        self.volume_pod: dict[str, Any] = {}
        self.volume: dict[str, Any] = {}

    def play(self, *args: str, **extra_vars: Any) -> subprocess.CompletedProcess[str]:
        variables = {"teardown_run_id": RUN_ID, "teardown_pod": self.pod["id"], "teardown_runs_dir": str(self.runs)}
        variables.update(extra_vars)
        env = ansible_env(self.emulator.url, self.emulator.api_key, RUNPOD_SSH_PRIVATE_KEY=str(self.key))
        command = [str(BIN / "ansible-playbook"), str(ROOT / "playbooks" / "teardown.yml"), *args]
        command += ["-e", json.dumps(variables)]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)

    def pod_status(self) -> int | str:
        status, _headers, pod = self.emulator.api("GET", f"/v2/pods/{self.pod['id']}")
        return pod["status"] if status == 200 else status

    def mutations(self) -> list[tuple[str, str]]:
        requests = self.emulator.admin("GET", "/_emulator/requests")["requests"]
        return [(r["method"], r["path"]) for r in requests if r["method"] in MUTATING]

    def pull(self, name: str) -> Path:
        """A copy of the trained checkpoint as the sync role's pull leaves it."""
        dest = self.run_dir / "ckpt" / name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(self.trained / name, dest)
        return dest

    def evidence(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "evidence" / "teardown.json").read_text())

    def state(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "state.json").read_text())


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The play's output with the line breaks and JSON escapes of a failure message folded."""
    return re.sub(r"\s+", " ", (done.stdout + done.stderr).replace('\\"', '"').replace("\\n", " "))


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"rc={done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"


def create_disk_pod(emulator: EmulatorProcess, name: str) -> dict[str, Any]:
    """A pod with a 20 GB persistent volume at /workspace, made through the API as an operator would."""
    body = {
        "name": name,
        "image": "runpod/pytorch",
        "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
        "ports": ["22/tcp"],
        "startSsh": True,
        "disk": 10,
        "mounts": {"persistent": {"size": 20, "path": "/workspace"}},
    }
    return emulator.admin("POST", "/v2/pods", body)


@pytest.fixture(scope="module")
def teardown(tmp_path_factory: pytest.TempPathFactory, pod_image: str):
    # pod_image (conftest.py): podman, SSH and the local pod image work, or the module fails naming what does not.
    tmp = tmp_path_factory.mktemp("teardown")
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "td", "-f", str(key)], check=True)
    # Two checkpoints (steps 2 and 4) from the reference trainer, run on the controller.
    config = tmp / "train.json"
    config.write_text(json.dumps({"run_id": RUN_ID, "steps": 4, "checkpoint": {"every_steps": 2}}))
    subprocess.run(
        [sys.executable, "-m", "trainops_train.train", "--config", str(config), "--run-dir", str(tmp / "trained")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with EmulatorProcess(
        backend="podman", state_dir=tmp / "emulator", extra_args=["--container-prefix", "rptdown"]
    ) as emulator:
        emulator.admin("PUT", "/v2/account/ssh-keys", {"keys": [key.with_suffix(".pub").read_text().strip()]})
        pod = create_disk_pod(emulator, POD_NAME)
        volume = emulator.admin(
            "POST", "/v2/network-volumes", {"name": VOLUME_NAME, "size": 10, "dataCenter": "EU-RO-1"}
        )
        volume_pod = emulator.admin(
            "POST",
            "/v2/pods",
            {
                "name": VOLUME_POD_NAME,
                "image": "runpod/pytorch",
                "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
                "dataCenterIds": ["EU-RO-1"],
                "ports": ["22/tcp"],
                "startSsh": True,
                "disk": 10,
                "mounts": {"network": [{"volumeId": volume["id"], "path": "/runpod-volume"}]},
            },
        )
        # The run's checkpoints on the network volume (its host directory), none on the controller.
        shutil.copytree(
            tmp / "trained" / "ckpt",
            tmp / "emulator" / "data" / "volumes" / volume["id"] / "trainops" / VOLUME_RUN_ID / "ckpt",
        )
        for started in (pod, volume_pod):
            emulator.wait_for(started["id"], lambda p: p["ssh"]["direct"] is not None, 120)
        state = Teardown(emulator, tmp, pod)
        state.volume_pod, state.volume = volume_pod, volume
        state.run_dir.mkdir(parents=True)
        # As the playbook that created the pod recorded it.
        (state.run_dir / "state.json").write_text(
            json.dumps(
                {
                    "format_version": 1,
                    "run_id": RUN_ID,
                    "api_url": emulator.url,
                    "started_at": "2026-12-03T00:00:00Z",
                    "updated_at": "2026-12-03T00:00:00Z",
                    "resources": [
                        {
                            "kind": "pod",
                            "id": pod["id"],
                            "name": POD_NAME,
                            "role": "train",
                            "action": "created",
                            "status": "RUNNING",
                            "recorded_at": "2026-12-03T00:00:00Z",
                            "updated_at": "2026-12-03T00:00:00Z",
                        }
                    ],
                }
            )
        )
        yield state


def test_refuses_a_pod_without_checkpoints_and_without_confirmation(teardown: Teardown):
    done = teardown.play()
    text = one_line(done)
    assert done.returncode != 0, explain(done)
    assert (
        f"has no checkpoint at all under {POD_CKPT} (the directory does not exist): "
        "set teardown_allow_no_known_checkpoint=true to terminate it without one." in text
    ), explain(done)
    assert (
        f"teardown_confirm is empty: set teardown_confirm={teardown.pod['id']} (or {POD_NAME}) to terminate pod" in text
    ), explain(done)
    assert teardown.pod_status() == "RUNNING"
    evidence = teardown.evidence()
    assert evidence["decision"] == "refused" and len(evidence["missing"]) == 2


def test_refuses_while_the_newest_checkpoint_is_not_pulled_and_confirm_names_another_pod(teardown: Teardown):
    # The pod's durable root (its persistent volume's host directory) gets both checkpoints; the controller
    # holds only the older one: not enough.
    on_pod = (
        teardown.emulator.state_dir
        / "data"
        / "pods"
        / teardown.pod["id"]
        / "persistent"
        / POD_CKPT.removeprefix("/workspace/")
    )
    shutil.copytree(teardown.trained, on_pod)
    teardown.pull(OLDER)
    done = teardown.play(teardown_confirm="trainops-td2-train")
    text = one_line(done)
    assert done.returncode != 0, explain(done)
    assert (
        f"the newest checkpoint on pod {POD_NAME}, {POD_CKPT}/{NEWEST} (step 4), is not verified on the controller: "
        f"{teardown.run_dir}/ckpt/{NEWEST} does not exist (the controller has {OLDER}); pull it with the sync role "
        f"(tasks_from: pull, sync_pull_checkpoints: [{NEWEST}])" in text
    ), explain(done)
    assert (
        'teardown_confirm "trainops-td2-train" names neither the id nor the name of this pod: '
        f"set teardown_confirm={teardown.pod['id']} (or {POD_NAME})" in text
    ), explain(done)
    assert teardown.pod_status() == "RUNNING"


def test_refuses_a_corrupt_pulled_copy(teardown: Teardown):
    copy = teardown.pull(NEWEST)
    weights = copy / "model.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    done = teardown.play(teardown_confirm=POD_NAME)
    text = one_line(done)
    assert done.returncode != 0, explain(done)
    assert (
        f"is not verified on the controller: checkpoint_verify load=true on {copy} failed: model.pt: sha256 mismatch"
        in text
    ), explain(done)
    assert "teardown_confirm" not in text.split("Missing:")[-1], explain(done)
    assert teardown.pod_status() == "RUNNING"


def test_check_mode_deletes_nothing(teardown: Teardown):
    teardown.pull(NEWEST)
    teardown.emulator.admin("DELETE", "/_emulator/requests")
    done = teardown.play("--check", teardown_confirm=teardown.pod["id"])
    assert done.returncode == 0, explain(done)
    assert f"Would terminate pod {POD_NAME} ({teardown.pod['id']})" in one_line(done), explain(done)
    assert teardown.pod_status() == "RUNNING"
    assert teardown.mutations() == []
    assert teardown.evidence()["decision"] == "refused"  # the last real run's; check mode wrote nothing
    assert "final" not in teardown.state()["resources"][0]


def test_terminates_when_everything_holds_and_records_the_final_state(teardown: Teardown):
    teardown.emulator.admin("DELETE", "/_emulator/requests")
    done = teardown.play(teardown_confirm=teardown.pod["id"])
    assert done.returncode == 0, explain(done)
    assert f"Terminated pod {POD_NAME} ({teardown.pod['id']}) of run {RUN_ID}; final status read from the API: " in (
        one_line(done)
    ), explain(done)
    assert teardown.pod_status() == 404
    assert teardown.mutations() == [("DELETE", f"/v2/pods/{teardown.pod['id']}")]
    requests = teardown.emulator.admin("GET", "/_emulator/requests")["requests"]
    delete_at = next(r["time"] for r in requests if r["method"] == "DELETE")
    assert any(r["method"] == "GET" and r["path"] == f"/v2/pods/{teardown.pod['id']}" for r in requests)
    assert requests[-1]["method"] == "GET" and requests[-1]["status"] == 404 and requests[-1]["time"] >= delete_at
    pod = teardown.state()["resources"][0]
    assert pod["status"] == "TERMINATED"
    assert pod["final"]["status"] == "TERMINATED" and pod["final"]["source"] == "api" and pod["final"]["read_at"]
    evidence = teardown.evidence()
    assert evidence["decision"] == "terminated" and evidence["missing"] == []
    assert evidence["final"] == pod["final"]
    pulled = evidence["checkpoints"]["pulled"]
    assert pulled["ok"] and pulled["loaded"]["ok"] and pulled["step"] == 4
    assert pulled["manifest_sha256"] == pulled["pod_manifest_sha256"]


def test_a_second_run_changes_nothing(teardown: Teardown):
    before = (
        (teardown.run_dir / "state.json").read_bytes(),
        (teardown.run_dir / "evidence" / "teardown.json").read_bytes(),
    )
    done = teardown.play(teardown_confirm=teardown.pod["id"])
    assert done.returncode == 0, explain(done)
    assert "is already gone from the account; nothing to do" in one_line(done), explain(done)
    assert re.search(r"localhost\s*:\s*ok=\d+\s+changed=0\s", done.stdout), explain(done)
    after = (
        (teardown.run_dir / "state.json").read_bytes(),
        (teardown.run_dir / "evidence" / "teardown.json").read_bytes(),
    )
    assert after == before


def test_terminates_a_stopped_pod_whose_newest_checkpoint_loads_on_its_network_volume(teardown: Teardown):
    pod_id = teardown.volume_pod["id"]
    teardown.emulator.admin("POST", f"/v2/pods/{pod_id}/action", {"action": "stop"})
    teardown.emulator.wait_for(pod_id, lambda p: p["status"] == "EXITED", 60)
    done = teardown.play(
        teardown_run_id=VOLUME_RUN_ID,
        teardown_pod=VOLUME_POD_NAME,
        teardown_confirm=VOLUME_POD_NAME,
        teardown_start_stopped=True,
    )
    assert done.returncode == 0, explain(done)
    # The run's state.json does not record this pod: the message says so rather than calling it the run's.
    assert (
        f"Terminated pod {VOLUME_POD_NAME} ({pod_id}) (not recorded in {teardown.runs / VOLUME_RUN_ID}/state.json: "
        f"not known to be of run {VOLUME_RUN_ID})" in one_line(done)
    ), explain(done)
    assert teardown.emulator.api("GET", f"/v2/pods/{pod_id}")[0] == 404
    assert teardown.emulator.api("GET", f"/v2/network-volumes/{teardown.volume['id']}")[0] == 200
    assert not (teardown.runs / VOLUME_RUN_ID / "ckpt").exists()
    evidence = json.loads((teardown.runs / VOLUME_RUN_ID / "evidence" / "teardown.json").read_text())
    on_volume = evidence["checkpoints"]["network_volume"]
    assert on_volume["ok"] and on_volume["found"] and on_volume["id"] == teardown.volume["id"]
    assert on_volume["checkpoint"] == f"/runpod-volume/trainops/{VOLUME_RUN_ID}/ckpt/{NEWEST}"
    assert on_volume["loaded"]["ok"] and on_volume["loaded"]["path"] == on_volume["checkpoint"]
    assert evidence["checkpoints"]["pulled"] is None
    assert evidence["final"]["status"] == "TERMINATED"
    assert evidence["pod"]["status_before"] == "EXITED" and evidence["pod"]["started_for_checks"]
    assert evidence["pod"]["recorded_by_run"] is False


def test_a_stopped_pod_terminated_unread_says_what_went_with_it_under_the_deprecated_flag(teardown: Teardown):
    run_id, name = "td3", "trainops-td3-train"
    pod = create_disk_pod(teardown.emulator, name)
    teardown.emulator.wait_for(pod["id"], lambda p: p["ssh"]["direct"] is not None, 120)
    on_pod = teardown.emulator.state_dir / "data" / "pods" / pod["id"] / "persistent" / f"trainops/{run_id}/ckpt"
    shutil.copytree(teardown.trained, on_pod)
    shutil.copytree(teardown.trained / OLDER, teardown.runs / run_id / "ckpt" / OLDER)
    teardown.emulator.admin("POST", f"/v2/pods/{pod['id']}/action", {"action": "stop"})
    teardown.emulator.wait_for(pod["id"], lambda p: p["status"] == "EXITED", 60)
    done = teardown.play(teardown_run_id=run_id, teardown_pod=pod["id"], teardown_confirm=name,
                         teardown_allow_no_checkpoint=True)  # fmt: skip
    text = one_line(done)
    assert done.returncode == 0, explain(done)
    assert f"Terminated pod {name} ({pod['id']})" in text, explain(done)
    went = (
        f"pod {name} ({pod['id']}) is EXITED and its durable root /workspace was not read: whatever checkpoints its"
        f" 20 GB volume disk holds are deleted with it; the controller holds {OLDER} (newest {OLDER})."
    )
    assert f"Its checkpoints: {went}" in text, explain(done)
    assert "[DEPRECATION WARNING]" in text and "allow_no_checkpoint" in text.split("[DEPRECATION WARNING]")[1], text
    assert teardown.emulator.api("GET", f"/v2/pods/{pod['id']}")[0] == 404
    evidence = json.loads((teardown.runs / run_id / "evidence" / "teardown.json").read_text())
    assert evidence["checkpoints"]["allow_no_known_checkpoint"] is True
    assert evidence["checkpoints"]["would_lose"] == {
        "read": False, "on_pod": None, "lost": None, "controller_has": [OLDER], "sentence": went,
    }  # fmt: skip
    assert evidence["final"]["status"] == "TERMINATED" and evidence["pod"]["status_before"] == "EXITED"
