"""`make doctor`: the self-check names the missing piece, and pods start from one definition of `podman run`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from runpod_emulator import doctor
from runpod_emulator.backends.base import LaunchSpec
from runpod_emulator.backends.podman import PodmanBackend, run_command

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.podman


def run_doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runpod_emulator.doctor", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=180,
        check=False,
    )


@pytest.fixture
def conf_without_init(tmp_path: Path) -> Path:
    """The project's containers.conf, with podman's --init pointed at a binary that is not there."""
    text = (ROOT / "config" / "containers.conf").read_text()
    conf = tmp_path / "containers.conf"
    conf.write_text(text.replace("[containers]\n", f'[containers]\ninit_path = "{tmp_path}/catatonit"\n', 1))
    return conf


def test_doctor_passes_and_names_what_it_checked(pod_image):
    result = run_doctor("--require-image")
    assert result.returncode == 0, result.stderr
    for piece in ("podman", "conmon", "runc", "catatonit", "slirp4netns", "ssh", "rsync", "debootstrap"):
        assert f"doctor: ok {piece} " in result.stdout, piece
    assert "22/tcp on 127.0.0.1:" in result.stdout
    assert "ssh login with a fresh key" in result.stdout and "rsync, tmux, python3 present" in result.stdout


def test_missing_container_init_is_named(pod_image, conf_without_init):
    result = run_doctor(env={"CONTAINERS_CONF": str(conf_without_init)})
    assert result.returncode == 1
    assert "doctor: catatonit: the container init" in result.stderr
    assert "apt package catatonit" in result.stderr


def test_podmans_own_init_error_is_named(pod_image, conf_without_init, monkeypatch):
    # Past the file check: the podman run itself fails as on a machine without catatonit.
    monkeypatch.setenv("CONTAINERS_CONF", str(conf_without_init))
    with pytest.raises(doctor.DoctorFailure) as failure:
        doctor.check_pod(pod_image)
    assert failure.value.piece == "catatonit"
    assert "container-init binary not found" in str(failure.value)


@pytest.mark.parametrize(("missing", "package"), [("slirp4netns", "slirp4netns"), ("ssh", "openssh-client")])
def test_missing_host_program_is_named(tmp_path, missing, package):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in doctor.HOST_TOOLS:
        found = subprocess.run(["which", tool.program], capture_output=True, text=True, check=False).stdout.strip()
        if tool.program != missing and found:
            (bin_dir / tool.program).symlink_to(found)
    result = run_doctor(env={"PATH": str(bin_dir)})
    assert result.returncode == 1
    assert f"doctor: {package}: `{missing}` is not on PATH" in result.stderr


def test_missing_pod_program_is_named(pod_image):
    with pytest.raises(doctor.DoctorFailure) as failure:
        doctor.check_pod(pod_image, pod_tools=("rsync", "trainops-no-such-tool"))
    assert failure.value.piece == "trainops-no-such-tool"
    assert "emulator/image/packages.txt" in str(failure.value)


def test_without_the_image_the_pod_check_is_skipped_unless_required(pod_image):
    absent = "localhost/trainops-pod:not-built"
    skipped = run_doctor("--image", absent)
    assert skipped.returncode == 0, skipped.stderr
    assert f"pod: skipped, {absent} is not built yet" in skipped.stdout
    required = run_doctor("--image", absent, "--require-image")
    assert required.returncode == 1
    assert "run `make image`" in required.stderr


def test_pod_tests_fail_with_the_doctors_message(pod_image, conf_without_init):
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         f"{ROOT}/tests/e2e/test_pod_image.py::test_host_keys_are_made_per_container"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
        env={**os.environ, "CONTAINERS_CONF": str(conf_without_init)},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout
    assert "doctor: catatonit:" in result.stdout


def test_the_backend_starts_pods_with_the_shared_arguments(tmp_path, monkeypatch):
    backend = PodmanBackend(tmp_path, "localhost/trainops-pod:x")
    calls = []
    monkeypatch.setattr(backend, "_run", lambda args, env=None, timeout_s=0: calls.append((args, env)) or
                        subprocess.CompletedProcess(args, 0, "", ""))  # fmt: skip
    secret = "s3cr3t-value-123"
    spec = LaunchSpec("pod1", 3, {"PUBLIC_KEY": "ssh-ed25519 AAAA k", "API_TOKEN": secret, "LANG": "C.UTF-8"},
                      True, [(tmp_path, "/workspace", False)])  # fmt: skip
    backend.launch(spec)
    args, env = calls[0]
    labels = {"trainops.emulator.state": str(tmp_path.resolve()), "trainops.emulator.pod": "pod1",
              "trainops.emulator.gen": "3"}  # fmt: skip
    expected = run_command("localhost/trainops-pod:x", "rpemu-pod1", hostname="pod1", labels=labels, env=spec.env,
                           mounts=spec.mounts)  # fmt: skip
    assert (args, env) == expected
    assert args[:3] == ["run", "-d", "--init"] and args[args.index("-p") :][:2] == ["-p", "127.0.0.1::22"]
    # Values travel in podman's environment, never on its command line (where `ps` shows them) ...
    assert not any(secret in arg or "AAAA" in arg for arg in args)
    assert args[args.index("API_TOKEN") - 1 :][:2] == ["-e", "API_TOKEN"] and env["API_TOKEN"] == secret
    # ... except the few names podman reads from its own environment.
    assert "LANG=C.UTF-8" in args
