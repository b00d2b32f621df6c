"""The bootstrap role installs what sync and job run on a pod when the image lacks it, or fails before any push.

RunPod's own images (runpod/pytorch) have openssh-server but no rsync. An emulator pod created with image
`trainops/pod:no-rsync` runs the local pod image's variant without rsync (emulator/image/variant.sh no-rsync),
whose only apt source is a local file repository holding rsync's .deb (/opt/trainops-apt): apt works with no
network. Each test is one podman emulator pod, then real `ansible-playbook` runs of the bootstrap role and the
sync role's push over real SSH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from runpod_emulator.testing import EmulatorProcess, ssh_run, wait_for_login

pytestmark = pytest.mark.podman

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "toolsrun"
TOOLS_TASK = "Bootstrap | rsync, python3 and tmux (or setsid), installed with apt when missing"
PUSH_TASK_SUFFIX = "record, push and verify the source"


class NoRsyncPod:
    """One emulator pod of image trainops/pod:no-rsync, and playbook runs of bootstrap (+ push) against it."""

    def __init__(self, emulator: EmulatorProcess, prefix: str, key: Path, public_key: str, tmp: Path):
        self.emulator = emulator
        self.key = key
        self.tmp = tmp
        assert emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [public_key]})[0] == 200
        body = {"name": "trainops-toolsrun-trainer", "image": "trainops/pod:no-rsync", "ports": ["22/tcp"],
                "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1}, "startSsh": True,
                "mounts": {"persistent": {"size": 20, "path": "/workspace"}}}  # fmt: skip
        status, _headers, pod = emulator.api("POST", "/v2/pods", body)
        assert status == 201, pod
        self.id = pod["id"]
        self.container = f"{prefix}-{self.id}"
        ready = emulator.wait_for(self.id, lambda p: p["ssh"]["direct"] is not None, timeout_s=120)
        self.port = ready["ssh"]["direct"]["port"]
        wait_for_login(key, self.port, 60)
        self.src = tmp / "src"
        self.src.mkdir()
        (self.src / "train.py").write_text("print('train')\n")
        git = ["git", "-C", str(self.src), "-c", "user.name=T", "-c", "user.email=t@example.invalid"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "first"], check=True)
        self.inventory = tmp / "inventory.ini"
        self.inventory.write_text(
            f"pod ansible_host=127.0.0.1 ansible_port={self.port} ansible_user=root ansible_ssh_private_key_file={key} "
            "ansible_python_interpreter=/usr/bin/python3 "
            "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR'\n"
        )
        tasks = [
            {"name": "Bootstrap", "ansible.builtin.include_role": {"name": "trainops.gpu.bootstrap"}},
            {"name": "Push", "ansible.builtin.include_role": {"name": "trainops.gpu.sync", "tasks_from": "push"}},
        ]
        self.playbook = tmp / "bootstrap_push.yml"
        self.playbook.write_text(json.dumps([{"hosts": "pod", "gather_facts": False, "tasks": tasks}]))

    def ssh(self, command: str) -> subprocess.CompletedProcess[str]:
        return ssh_run(self.key, self.port, command, timeout_s=60)

    def run(self, **extra) -> tuple[int, dict[str, dict], str]:
        """(rc, {task name: the pod's result}, everything printed) of bootstrap then push."""
        extra_vars = {"bootstrap_min_free_gb_container": 0, "bootstrap_min_free_gb_durable": 0,
                      "bootstrap_ssh_timeout": 60, "bootstrap_torch_check": "report", "sync_run_id": RUN_ID,
                      "sync_src": str(self.src), "sync_runs_dir": str(self.tmp / "runs"), **extra}  # fmt: skip
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                   ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"))  # fmt: skip
        playbook = str(Path(sys.executable).with_name("ansible-playbook"))
        command = [playbook, "-i", str(self.inventory), str(self.playbook), "-e", json.dumps(extra_vars)]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
        report = json.loads(done.stdout[done.stdout.index("{") :])
        results = {t["task"]["name"].partition(" : ")[2] or t["task"]["name"]: t["hosts"]["pod"]
                   for t in report["plays"][0]["tasks"] if "pod" in t["hosts"]}  # fmt: skip
        return done.returncode, results, done.stdout + done.stderr


@pytest.fixture
def pod(pod_image_no_rsync, ssh_keypair, tmp_path):
    key, public_key = ssh_keypair
    prefix = f"rpbt{os.getpid()}"
    with EmulatorProcess(
        backend="podman", state_dir=tmp_path / "emulator", extra_args=["--container-prefix", prefix]
    ) as emulator:
        yield NoRsyncPod(emulator, prefix, key, public_key, tmp_path)


def push_result(results: dict[str, dict]) -> dict | None:
    return next((r for name, r in results.items() if name.endswith(PUSH_TASK_SUFFIX)), None)


def test_bootstrap_installs_the_missing_rsync_with_apt_offline_and_the_push_then_works(pod, pod_image_no_rsync):
    # The pod runs the variant picked by its image name, and it lacks rsync.
    inspected = subprocess.run(["podman", "inspect", "--format", "{{.ImageName}}", pod.container],
                               capture_output=True, text=True, check=True)  # fmt: skip
    assert inspected.stdout.strip() == pod_image_no_rsync
    assert pod.ssh("command -v rsync").returncode == 1
    assert pod.ssh("command -v sshd tmux python3").returncode == 0

    rc, results, printed = pod.run()
    assert rc == 0, printed[-4000:]
    tools = results[TOOLS_TASK]
    assert tools["changed"] and tools["missing"] == ["rsync"] and tools["installed"] == ["rsync"], tools
    assert tools["found"]["rsync"] == "/usr/bin/rsync"
    # The image has no apt lists (as RunPod's), so apt-get update ran first, against the local repository only.
    assert tools["apt"]["update"] is True
    assert tools["apt"]["commands"][-1][:4] == ["apt-get", "install", "-y", "--no-install-recommends"]
    assert tools["apt"]["commands"][-1][-1] == "rsync"
    verdict = results["Bootstrap | record what was found in bootstrap_result"]["ansible_facts"]["bootstrap_result"]
    assert verdict["ready"] and verdict["installed"] == ["rsync"] and verdict["tools"]["missing"] == ["rsync"]
    assert "installed with apt: rsync;" in results["Bootstrap | summary"]["msg"]
    pushed = push_result(results)
    assert pushed and pushed["verified"] and pushed["files_transferred"] == 1, pushed
    listed = pod.ssh(f"cat /workspace/trainops/{RUN_ID}/src/train.py")
    assert listed.stdout == "print('train')\n", listed.stderr

    # Once installed, nothing is missing: a second run installs nothing.
    rc, results, printed = pod.run()
    assert rc == 0, printed[-4000:]
    tools = results[TOOLS_TASK]
    assert not tools["changed"] and tools["missing"] == [] and tools["installed"] == [] and not tools["apt"]["commands"]


def test_bootstrap_fails_naming_rsync_before_any_push_when_it_cannot_be_installed(pod):
    # Installing turned off: fails at once, apt never runs.
    rc, results, printed = pod.run(bootstrap_install_missing=False)
    assert rc != 0
    tools = results[TOOLS_TASK]
    assert tools["failed"] and not tools["apt"]["commands"], tools
    assert tools["msg"].startswith("missing on the pod: rsync (needed by the sync role")
    assert "installing is turned off" in tools["msg"] and "bootstrap_install_missing: true" in tools["msg"]
    assert push_result(results) is None, printed[-3000:]

    # The image's local apt repository removed: apt has nothing to install rsync from (and no network).
    subprocess.run(["podman", "exec", pod.container, "rm", "-rf", "/opt/trainops-apt"], check=True, timeout=60)
    rc, results, printed = pod.run()
    assert rc != 0
    tools = results[TOOLS_TASK]
    assert tools["failed"] and tools["apt"]["update"] is True and tools["installed"] == [], tools
    assert tools["msg"].startswith("missing on the pod: rsync (needed by the sync role"), tools["msg"]
    assert "rsync cannot be installed: no apt source of the pod offers rsync" in tools["msg"]
    assert "use an image that has it" in tools["msg"]
    # Nothing after the check ran: no push, no run directory, no environment file.
    assert push_result(results) is None and "Bootstrap | summary" not in results
    assert pod.ssh(f"test -e /workspace/trainops/{RUN_ID} || test -e /etc/trainops/env.sh").returncode == 1
    assert pod.ssh("command -v rsync").returncode == 1
