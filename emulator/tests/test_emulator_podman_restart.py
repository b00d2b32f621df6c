"""An emulator restart (clean or killed) keeps every record and reconciles with the containers that exist."""

from __future__ import annotations

import time

import pytest
from emulator_helpers import GPU, pod_image, podman, require_podman_image
from runpod_emulator.testing import EmulatorProcess, ssh_run

pytestmark = pytest.mark.podman


def test_restart_adopts_running_pods_marks_vanished_exited_and_removes_unknown(tmp_path, ssh_keypair):
    require_podman_image()
    key, public_key = ssh_keypair
    prefix = "rpemu-restart"
    emu = EmulatorProcess(backend="podman", state_dir=tmp_path / "emu", extra_args=["--container-prefix", prefix])
    bystander_id = None
    try:
        emu.start()
        emu.admin("PUT", "/v2/account/ssh-keys", {"keys": [public_key]})
        volume = emu.admin("POST", "/v2/network-volumes", {"name": "keep", "size": 10, "dataCenter": "EU-RO-1"})
        body = {"image": "i", "gpu": {"id": GPU}, "ports": ["22/tcp"], "startSsh": True}
        survivor = emu.admin("POST", "/v2/pods", {"name": "survivor", **body})
        victim = emu.admin("POST", "/v2/pods", {"name": "victim", **body})
        for pod in (survivor, victim):
            emu.wait_for(pod["id"], lambda p: p["ssh"]["direct"] is not None, 90)
        old_port = emu.api("GET", f"/v2/pods/{survivor['id']}")[2]["ssh"]["direct"]["port"]

        emu.kill()  # SIGKILL: nothing flushed at exit
        assert podman("rm", "-f", "-t", "0", f"{prefix}-{victim['id']}").returncode == 0
        # A container with this emulator's label but no record: must go. One without the label: must stay.
        label = f"trainops.emulator.state={emu.state_dir}"
        ghost = podman("run", "-d", "--label", label, "--label", "trainops.emulator.pod=ghost", pod_image())
        bystander = podman("run", "-d", "--label", "trainops.emulator.state=/elsewhere", pod_image())
        assert ghost.returncode == 0 and bystander.returncode == 0
        bystander_id = bystander.stdout.strip()

        emu.start()
        pods = {p["name"]: p for p in emu.api("GET", "/v2/pods")[2]["pods"]}
        assert set(pods) == {"survivor", "victim"}
        assert pods["victim"]["status"] == "EXITED"
        assert emu.api("GET", "/v2/network-volumes")[2]["networkVolumes"][0]["id"] == volume["id"]
        assert emu.api("GET", "/v2/account/ssh-keys")[2] == {"keys": [public_key]}
        adopted = emu.wait_for(survivor["id"], lambda p: p["ssh"]["direct"] is not None, 60)
        assert adopted["status"] == "RUNNING" and adopted["ssh"]["direct"]["port"] == old_port
        assert ssh_run(key, old_port, "true").returncode == 0
        assert podman("container", "exists", ghost.stdout.strip()).returncode != 0
        assert podman("container", "exists", bystander_id).returncode == 0
        billing = emu.api("GET", "/v2/billing/pods")[2]
        assert billing["metadata"]["uniquePodCount"] == 2
        assert labelled_containers(emu) == {f"{prefix}-{survivor['id']}"}
        emu.admin("POST", "/_emulator/reset")
        assert labelled_containers(emu) == set()  # the reset itself, not the test helper's cleanup
    finally:
        if bystander_id:
            podman("rm", "-f", "-t", "0", bystander_id)
        emu.close()


def labelled_containers(emu: EmulatorProcess) -> set[str]:
    """Names of the containers that carry this emulator's state-directory label."""
    label = f"label=trainops.emulator.state={emu.state_dir}"
    listed = podman("ps", "-a", "--filter", label, "--format", "{{.Names}}")
    assert listed.returncode == 0, listed.stderr
    return set(listed.stdout.split())


def test_a_kill_while_containers_launch_leaves_one_known_container_per_pod(tmp_path):
    require_podman_image()
    prefix = "rpemu-midlaunch"
    emu = EmulatorProcess(backend="podman", state_dir=tmp_path / "emu", extra_args=["--container-prefix", prefix])
    try:
        emu.start()
        body = {"image": "i", "cpu": {"id": "cpu3c", "vcpuCount": 2}, "ports": ["22/tcp"]}
        pods = [emu.admin("POST", "/v2/pods", {"name": f"m{index}", **body}) for index in range(3)]
        deadline = time.monotonic() + 60
        while not labelled_containers(emu) and time.monotonic() < deadline:
            time.sleep(0.05)
        emu.kill()  # the first container exists; the others are being launched
        emu.start()
        doomed = pods[2]["id"]
        emu.admin("DELETE", f"/v2/pods/{doomed}")  # its container may still appear from the killed launch
        wanted = {f"{prefix}-{pod['id']}" for pod in pods[:2]}
        for pod in pods[:2]:
            assert emu.wait_for(pod["id"], lambda p: p["status"] == "RUNNING", 90)["status"] == "RUNNING"
        # Launches begun by the killed emulator may land late: within a few monitor passes, exactly the
        # containers of the pods still wanted remain.
        deadline = time.monotonic() + 30
        while labelled_containers(emu) != wanted and time.monotonic() < deadline:
            time.sleep(0.5)
        assert labelled_containers(emu) == wanted
        assert {p["id"] for p in emu.admin("GET", "/v2/pods")["pods"]} == {pod["id"] for pod in pods[:2]}
    finally:
        emu.close()
