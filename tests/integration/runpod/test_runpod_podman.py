"""A small set against the emulator's podman backend: real containers with sshd, reached by Ansible."""

from __future__ import annotations

import os
import subprocess

import pytest
from runpod_emulator.doctor import DoctorFailure, ensure_pods_can_run
from runpod_integration_helpers import BIN, ROOT, EmulatorProcess, ansible_env, run_inventory, run_playbook

pytestmark = [pytest.mark.podman, pytest.mark.slow]


@pytest.fixture(scope="module")
def pod_image() -> str:
    """The local pod image once `make doctor`'s checks pass; fails (never skips) without podman, SSH or the image,
    as every other podman test does (tests/e2e/conftest.py)."""
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "config" / "containers.conf"))
    try:
        return ensure_pods_can_run()
    except DoctorFailure as exc:
        failure = str(exc)
    pytest.fail(failure, pytrace=False)


def ping(emulator, private_key) -> subprocess.CompletedProcess:
    env = ansible_env(emulator, RUNPOD_SSH_PRIVATE_KEY=str(private_key))
    command = [
        str(BIN / "ansible"),
        "-i",
        str(ROOT / "inventories" / "local.runpod.yml"),
        "all",
        "-m",
        "ansible.builtin.ping",
    ]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_pod_reachable_by_ansible_and_again_on_its_new_port_after_stop_start(tmp_path, pod_image):
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public_key = key.with_suffix(".pub").read_text().strip()
    with EmulatorProcess(
        backend="podman", state_dir=tmp_path / "emulator", extra_args=["--container-prefix", "rpmodtest"]
    ) as emulator:
        first = run_playbook(emulator, "podman_pod.yml", {"public_key": public_key})
        assert first.rc == 0, first.explain()
        pod = first.task("Pod in the wanted state")["pod"]
        assert pod["status"] == "RUNNING" and pod["ssh_port"]

        pinged = ping(emulator, key)
        assert pinged.returncode == 0 and '"ping": "pong"' in pinged.stdout, pinged.stdout + pinged.stderr

        for state in ("stopped", "running"):
            cycled = run_playbook(emulator, "podman_pod.yml", {"public_key": public_key, "pod_state": state})
            assert cycled.rc == 0, cycled.explain()
        restarted = cycled.task("Pod in the wanted state")["pod"]
        assert restarted["id"] == pod["id"] and restarted["ssh_port"] != pod["ssh_port"]

        inventory, _output = run_inventory(emulator, ROOT / "inventories" / "local.runpod.yml")
        assert inventory["_meta"]["hostvars"]["trainops-pm-trainer"]["ansible_port"] == restarted["ssh_port"]
        pinged = ping(emulator, key)
        assert pinged.returncode == 0 and '"ping": "pong"' in pinged.stdout, pinged.stdout + pinged.stderr
