"""The local pod image behaves like a RunPod image: PUBLIC_KEY gives SSH, env stays with PID 1."""

from __future__ import annotations

import subprocess
import time

import pytest
from runpod_emulator.backends.podman import run_command
from runpod_emulator.testing import ssh_run as ssh
from runpod_emulator.testing import wait_for_login as wait_for_ssh

pytestmark = pytest.mark.podman


def start_pod(image: str, name: str, env: dict[str, str]) -> int:
    """Start a container with the emulator's own podman arguments; return its SSH port, checked on loopback."""
    args, podman_env = run_command(image, name, env=env)
    subprocess.run(["podman", *args], check=True, capture_output=True, env=podman_env)
    out = subprocess.run(["podman", "port", name, "22/tcp"], check=True, capture_output=True, text=True).stdout
    host, port = out.strip().splitlines()[0].rsplit(":", 1)
    assert host == "127.0.0.1", f"ssh published off loopback: {host}"
    return int(port)


def in_container(name: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", "exec", name, "sh", "-c", command], capture_output=True, text=True, check=False)


def test_public_key_gives_ssh_with_torch_and_env_is_pid1_only(pod_image, ssh_keypair, container_name):
    key, public = ssh_keypair
    env = {"PUBLIC_KEY": public, "RUNPOD_POD_ID": "test-pod", "TRAINOPS_SECRET_PROBE": "only-for-pid1"}
    port = start_pod(pod_image, container_name, env)
    wait_for_ssh(key, port)

    torch = ssh(key, port, 'python3 -c "import torch, numpy; print(torch.__version__)"')
    assert torch.returncode == 0, torch.stderr
    assert torch.stdout.strip().startswith("2.13.0")

    # As on RunPod, container env reaches the entry point but not SSH sessions.
    session = ssh(key, port, 'echo "probe=${TRAINOPS_SECRET_PROBE:-absent} pod=${RUNPOD_POD_ID:-absent}"')
    assert session.stdout.strip() == "probe=absent pod=absent"
    entry = in_container(container_name, "tr '\\0' '\\n' < /proc/$(pgrep -f start.sh | head -1)/environ")
    assert "TRAINOPS_SECRET_PROBE=only-for-pid1" in entry.stdout.splitlines()


def test_without_public_key_there_is_no_ssh(pod_image, ssh_keypair, container_name):
    port = start_pod(pod_image, container_name, {})
    time.sleep(2)
    assert ssh(ssh_keypair[0], port, "true", timeout_s=15).returncode != 0
    assert in_container(container_name, "pgrep -x sshd").returncode != 0, "sshd runs without a PUBLIC_KEY"


def test_host_keys_are_made_per_container(pod_image, ssh_keypair, container_name):
    baked = subprocess.run(
        ["podman", "run", "--rm", pod_image, "sh", "-c", "ls /etc/ssh/ssh_host_* 2>/dev/null | wc -l"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert baked.stdout.strip() == "0", "host keys are baked into the image"

    key, public = ssh_keypair
    wait_for_ssh(key, start_pod(pod_image, container_name, {"PUBLIC_KEY": public}))
    made = in_container(container_name, "ls /etc/ssh/ssh_host_ed25519_key.pub")
    assert made.returncode == 0, "the container did not generate its own host key"
