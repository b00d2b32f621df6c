"""The local pod image behaves like a RunPod image: PUBLIC_KEY gives SSH, env stays with PID 1."""

from __future__ import annotations

import subprocess
import time

import pytest

pytestmark = pytest.mark.podman


def ssh(key, port: int, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "ssh",
            "-i",
            str(key),
            "-p",
            str(port),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "LogLevel=ERROR",
            "root@127.0.0.1",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def wait_for_ssh(key, port: int, deadline_s: float = 60) -> None:
    end = time.monotonic() + deadline_s
    while True:
        result = ssh(key, port, "true", timeout=10)
        if result.returncode == 0:
            return
        if time.monotonic() > end:
            raise AssertionError(f"sshd on 127.0.0.1:{port} did not answer in {deadline_s} s: {result.stderr}")
        time.sleep(0.5)


def published_ssh_port(name: str) -> tuple[str, int]:
    out = subprocess.run(["podman", "port", name, "22/tcp"], check=True, capture_output=True, text=True).stdout
    host, port = out.strip().splitlines()[0].rsplit(":", 1)
    return host, int(port)


def test_public_key_gives_ssh_with_torch_and_env_is_pid1_only(pod_image, ssh_keypair, container_name):
    key, public = ssh_keypair
    subprocess.run(
        [
            "podman",
            "run",
            "-d",
            "--init",
            "--name",
            container_name,
            "-p",
            "127.0.0.1::22",
            "-e",
            f"PUBLIC_KEY={public}",
            "-e",
            "RUNPOD_POD_ID=test-pod",
            "-e",
            "TRAINOPS_SECRET_PROBE=only-for-pid1",
            pod_image,
        ],
        check=True,
        capture_output=True,
    )
    host, port = published_ssh_port(container_name)
    assert host == "127.0.0.1", f"ssh published off loopback: {host}"
    assert port > 0

    wait_for_ssh(key, port)

    torch = ssh(key, port, 'python3 -c "import torch, numpy; print(torch.__version__)"')
    assert torch.returncode == 0, torch.stderr
    assert torch.stdout.strip().startswith("2.13.0")

    # As on RunPod, container env reaches the entry point but not SSH sessions.
    session = ssh(key, port, 'echo "probe=${TRAINOPS_SECRET_PROBE:-absent} pod=${RUNPOD_POD_ID:-absent}"')
    assert session.stdout.strip() == "probe=absent pod=absent"
    entry = subprocess.run(
        ["podman", "exec", container_name, "sh", "-c", "tr '\\0' '\\n' < /proc/$(pgrep -f start.sh | head -1)/environ"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "TRAINOPS_SECRET_PROBE=only-for-pid1" in entry.stdout.splitlines()


def test_without_public_key_there_is_no_ssh(pod_image, ssh_keypair, container_name):
    key = ssh_keypair[0]
    subprocess.run(
        ["podman", "run", "-d", "--init", "--name", container_name, "-p", "127.0.0.1::22", pod_image],
        check=True,
        capture_output=True,
    )
    port = published_ssh_port(container_name)[1]
    time.sleep(2)
    result = ssh(key, port, "true", timeout=15)
    assert result.returncode != 0
    running = subprocess.run(
        ["podman", "exec", container_name, "pgrep", "-x", "sshd"], capture_output=True, check=False
    )
    assert running.returncode != 0, "sshd runs although no PUBLIC_KEY was given"


def test_host_keys_are_made_per_container(pod_image, ssh_keypair, container_name):
    public = ssh_keypair[1]
    subprocess.run(
        [
            "podman",
            "run",
            "-d",
            "--init",
            "--name",
            container_name,
            "-p",
            "127.0.0.1::22",
            "-e",
            f"PUBLIC_KEY={public}",
            pod_image,
        ],
        check=True,
        capture_output=True,
    )
    image_keys = subprocess.run(
        ["podman", "run", "--rm", pod_image, "sh", "-c", "ls /etc/ssh/ssh_host_* 2>/dev/null | wc -l"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert image_keys.stdout.strip() == "0", "host keys are baked into the image"
