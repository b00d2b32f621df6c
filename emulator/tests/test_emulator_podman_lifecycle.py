"""Pod behaviour on the podman backend, checked through real SSH into real containers."""

from __future__ import annotations

import json
import socket
import time

import pytest
from emulator_helpers import GPU, podman
from runpod_emulator.backends.podman import probe_ssh_banner
from runpod_emulator.testing import EmulatorProcess, ssh_run

pytestmark = pytest.mark.podman


def create(emu: EmulatorProcess, **extra) -> dict:
    body = {"name": "lifecycle", "image": "runpod/pytorch", "gpu": {"id": GPU, "count": 1}, "ports": ["22/tcp"]}
    body.update(extra)
    status, _h, pod = emu.api("POST", "/v2/pods", body)
    assert status == 201, pod
    return pod


def ssh_ready(emu: EmulatorProcess, pod_id: str, timeout_s: float = 90) -> dict:
    return emu.wait_for(pod_id, lambda p: p["ssh"]["direct"] is not None, timeout_s)


def action(emu: EmulatorProcess, pod_id: str, name: str) -> dict:
    status, _h, body = emu.api("POST", f"/v2/pods/{pod_id}/action", {"action": name})
    assert status in (200, 204), body
    return body


def test_walk_ssh_after_running_env_only_for_pid1(podman_emulator, ssh_keypair):
    key = ssh_keypair[0]
    pod = create(podman_emulator, startSsh=True, env={"TRAINOPS_SECRET": "s3cr3t-value"})
    seen: list[tuple[str, bool]] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        current = podman_emulator.api("GET", f"/v2/pods/{pod['id']}")[2]
        state = (current["status"], current["ssh"]["direct"] is not None)
        if not seen or seen[-1] != state:
            seen.append(state)
        if state[1]:
            break
        time.sleep(0.02)
    statuses = [status for status, _ssh in seen]
    assert statuses[0] == "PROVISIONING" and statuses[-1] == "RUNNING"
    assert statuses.index("PROVISIONING") < statuses.index("RUNNING")
    # RUNNING is not ready: ssh.direct appeared only after RUNNING (and only once sshd answered).
    assert all(not has_ssh for status, has_ssh in seen if status != "RUNNING")
    direct = current["ssh"]["direct"]
    assert direct["host"] == "127.0.0.1" and current["ssh"]["proxy"] is None
    assert probe_ssh_banner(direct["port"])
    result = ssh_run(key, direct["port"], "hostname; env | grep -c TRAINOPS_SECRET; tr '\\0' '\\n' < /proc/1/environ")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == pod["id"]
    assert lines[1] == "0"  # the SSH session does not see the container env
    assert "TRAINOPS_SECRET=s3cr3t-value" in lines[2:]  # PID 1 has it
    assert f"RUNPOD_POD_ID={pod['id']}" in lines[2:]
    action(podman_emulator, pod["id"], "terminate")


def test_stop_wipes_disk_keeps_persistent_new_port_each_start_terminate_deletes(podman_emulator, ssh_keypair):
    key = ssh_keypair[0]
    pod = create(podman_emulator, startSsh=True, mounts={"persistent": {"size": 10, "path": "/workspace"}})
    pod_id = pod["id"]
    first = ssh_ready(podman_emulator, pod_id)["ssh"]["direct"]["port"]
    result = ssh_run(key, first, "echo durable > /workspace/keep; echo gone > /root/ephemeral; sync")
    assert result.returncode == 0, result.stderr
    stopped = action(podman_emulator, pod_id, "stop")
    assert stopped["status"] == "EXITED" and stopped["ssh"]["direct"] is None and stopped["cost"] == 0.0
    action(podman_emulator, pod_id, "start")
    second = ssh_ready(podman_emulator, pod_id)["ssh"]["direct"]["port"]
    assert second != first
    result = ssh_run(key, second, "cat /workspace/keep; ls /root/ephemeral 2>&1 || true")
    assert result.stdout.splitlines()[0] == "durable"
    assert "No such file" in result.stdout
    action(podman_emulator, pod_id, "restart")
    third = ssh_ready(podman_emulator, pod_id)["ssh"]["direct"]["port"]
    assert third not in (first, second)
    assert ssh_run(key, third, "cat /workspace/keep").stdout.strip() == "durable"
    host_dir = podman_emulator.state_dir / "data" / "pods" / pod_id / "persistent"
    assert (host_dir / "keep").read_text().strip() == "durable"
    assert podman_emulator.api("DELETE", f"/v2/pods/{pod_id}")[0] == 204
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (host_dir.exists() or _container_exists(pod_id)):
        time.sleep(0.2)
    assert not host_dir.exists(), "the persistent mount dies with the pod"
    assert not _container_exists(pod_id)


def _container_exists(pod_id: str) -> bool:
    return podman("container", "exists", f"rpemu-test-{pod_id}").returncode == 0


def test_network_volume_outlives_its_pod_and_stays_in_its_data_center(podman_emulator, ssh_keypair):
    key = ssh_keypair[0]
    volume = podman_emulator.admin("POST", "/v2/network-volumes", {"name": "ckpt", "size": 10, "dataCenter": "EU-RO-1"})
    mount = {"network": [{"volumeId": volume["id"], "path": "/runpod-volume"}]}
    refused = podman_emulator.api(
        "POST",
        "/v2/pods",
        {
            "name": "x",
            "image": "i",
            "cpu": {"id": "cpu3c", "vcpuCount": 2},
            "mounts": mount,
            "dataCenterIds": ["US-TX-3"],
        },
    )
    assert refused[0] == 400 and "EU-RO-1" in refused[2]["detail"]
    writer = create(podman_emulator, startSsh=True, mounts=mount)
    port = ssh_ready(podman_emulator, writer["id"])["ssh"]["direct"]["port"]
    assert ssh_run(key, port, "echo step-42 > /runpod-volume/latest && sync").returncode == 0
    action(podman_emulator, writer["id"], "terminate")
    reader = podman_emulator.admin(
        "POST",
        "/v2/pods",
        {
            "name": "reader",
            "image": "i",
            "cpu": {"id": "cpu3c", "vcpuCount": 2},
            "ports": ["22/tcp"],
            "startSsh": True,
            "mounts": mount,
        },
    )
    assert reader["dataCenterId"] == "EU-RO-1"
    port = ssh_ready(podman_emulator, reader["id"])["ssh"]["direct"]["port"]
    assert ssh_run(key, port, "cat /runpod-volume/latest").stdout.strip() == "step-42"
    # A CPU pod has no GPU and no nvidia-smi.
    assert ssh_run(key, port, "command -v nvidia-smi || echo none").stdout.strip() == "none"
    action(podman_emulator, reader["id"], "terminate")


def test_without_start_ssh_there_is_no_ssh(podman_emulator):
    pod = create(podman_emulator)
    running = podman_emulator.wait_for(pod["id"], lambda p: p["status"] == "RUNNING", 90)
    public = running["runtime"]["ports"][0]["public"]
    assert isinstance(public, int)
    time.sleep(1.5)
    assert not probe_ssh_banner(public)
    assert podman_emulator.api("GET", f"/v2/pods/{pod['id']}")[2]["ssh"]["direct"] is None
    action(podman_emulator, pod["id"], "terminate")


def test_gpu_shim_and_restart_without_gpus(podman_emulator, ssh_keypair):
    key = ssh_keypair[0]
    pod = create(podman_emulator, startSsh=True, gpu={"id": GPU, "count": 2})
    port = ssh_ready(podman_emulator, pod["id"])["ssh"]["direct"]["port"]
    query = "nvidia-smi --query-gpu=index,name,memory.total --format=csv"
    result = ssh_run(
        key, port, f"{query}; {query},noheader,nounits; python3 -c 'import torch; print(torch.cuda.is_available())'"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "index, name, memory.total [MiB]",
        "0, NVIDIA H100 80GB HBM3 (emulated), 81559 MiB",
        "1, NVIDIA H100 80GB HBM3 (emulated), 81559 MiB",
        "0, NVIDIA H100 80GB HBM3 (emulated), 81559",
        "1, NVIDIA H100 80GB HBM3 (emulated), 81559",
        "False",
    ]
    # The table's CUDA is the host CUDA the API reports for the pod.
    banner = ssh_run(key, port, "nvidia-smi | grep -o 'CUDA Version: [0-9.]*'").stdout.strip()
    assert banner == f"CUDA Version: {pod['cudaVersion']}"
    restarted = podman_emulator.admin("POST", f"/_emulator/pods/{pod['id']}/restart-without-gpus")
    assert restarted["gpu"]["count"] == 0
    running = ssh_ready(podman_emulator, pod["id"])
    assert running["gpu"]["count"] == 0
    port = running["ssh"]["direct"]["port"]
    result = ssh_run(key, port, f"{query}; echo rc=$?; tr '\\0' '\\n' < /proc/1/environ | grep RUNPOD_GPU_COUNT")
    assert result.stdout.splitlines() == ["No devices were found", "rc=6", "RUNPOD_GPU_COUNT=0"]
    action(podman_emulator, pod["id"], "terminate")


def test_admin_kill_is_a_host_failure(podman_emulator, ssh_keypair):
    key = ssh_keypair[0]
    pod = create(podman_emulator, startSsh=True)
    port = ssh_ready(podman_emulator, pod["id"])["ssh"]["direct"]["port"]
    assert ssh_run(key, port, "true").returncode == 0
    started = time.monotonic()
    killed = podman_emulator.admin("POST", f"/_emulator/pods/{pod['id']}/kill", {"grace_s": 2})
    assert killed["status"] == "EXITED" and killed["ssh"]["direct"] is None and killed["cost"] == 0.0
    assert time.monotonic() - started < 60
    assert not _container_exists(pod["id"])
    assert not probe_ssh_banner(port)
    # The entry point got SIGTERM and exited cleanly (a SIGKILL would have been exit code 137).
    lines = [e["line"] for e in _system_log(podman_emulator, pod["id"])]
    assert "container stopped: exit code 0 (after SIGTERM)" in lines
    action(podman_emulator, pod["id"], "start")
    assert ssh_ready(podman_emulator, pod["id"])["ssh"]["direct"]["port"] != port
    action(podman_emulator, pod["id"], "terminate")


def _system_log(emu: EmulatorProcess, pod_id: str) -> list[dict]:
    with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as conn:
        conn.sendall(
            f"GET /v2/pods/{pod_id}/logs?source=system&tail=100 HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {emu.api_key}\r\n\r\n".encode()
        )
        conn.settimeout(1.0)
        data = b""
        try:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            pass  # the stream stays open: what arrived within a second is the backlog
    body = data.partition(b"\r\n\r\n")[2].decode()
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


def test_container_dying_underneath_is_noticed(podman_emulator):
    pod = create(podman_emulator, startSsh=True)
    ssh_ready(podman_emulator, pod["id"])
    assert podman("rm", "-f", "-t", "0", f"rpemu-test-{pod['id']}").returncode == 0
    exited = podman_emulator.wait_for(pod["id"], lambda p: p["status"] == "EXITED", 30)
    assert exited["cost"] == 0.0
    action(podman_emulator, pod["id"], "terminate")


def test_sse_container_logs(podman_emulator, ssh_keypair):
    pod = create(podman_emulator, startSsh=True)
    port = ssh_ready(podman_emulator, pod["id"])["ssh"]["direct"]["port"]
    # What PID 1 writes is the container's output, as `podman logs` (and RunPod's log stream) show it.
    assert ssh_run(ssh_keypair[0], port, "echo trainer-says-hello > /proc/1/fd/1").returncode == 0
    with socket.create_connection(("127.0.0.1", podman_emulator.port), timeout=10) as conn:
        conn.sendall(
            f"GET /v2/pods/{pod['id']}/logs?tail=50 HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {podman_emulator.api_key}\r\n\r\n".encode()
        )
        data = b""
        deadline = time.monotonic() + 10
        while b"trainer-says-hello" not in data and time.monotonic() < deadline:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    assert b"text/event-stream" in data
    assert b'"source": "system", "line": "sshd answers' in data
    # The status walk as the pod's system log records it (too quick on podman to catch by polling).
    assert b"pod status PROVISIONING -> STARTING" in data and b"pod status STARTING -> RUNNING" in data
    assert b'"source": "container", "line": "trainer-says-hello"' in data
    action(podman_emulator, pod["id"], "terminate")


def test_podman_backend_refuses_what_podman_cannot_run(podman_emulator):
    """Limits of the podman backend beyond RunPod's schema (the memory backend takes all of these)."""
    for extra, needle in (
        ({"env": {"A=B": "1"}}, "$.env: property name 'A=B' does not match"),
        ({"env": {"A": "a\u0000b"}}, "$.env.A: does not match"),
        ({"mounts": {"persistent": {"size": 10, "path": "/a:/b"}}}, "$.mounts.persistent.path"),
        ({"mounts": {"network": [{"volumeId": "", "path": "/v"}]}}, "$.mounts.network[0].volumeId"),
    ):
        body = {"name": "limits", "image": "i", "gpu": {"id": GPU}, **extra}
        status, _h, problem = podman_emulator.api("POST", "/v2/pods", body)
        assert status == 422 and needle in problem["detail"], (extra, problem)
        assert "a limit of the podman backend" in problem["detail"], problem
    pod = create(podman_emulator, name="limits-patch")
    status, _h, problem = podman_emulator.api("PATCH", f"/v2/pods/{pod['id']}", {"env": {"1X": "v"}})
    assert status == 422 and "property name '1X'" in problem["detail"], problem
    action(podman_emulator, pod["id"], "terminate")
