"""Fixtures for tests that run real containers from the local pod image."""

from __future__ import annotations

import os
import pathlib
import subprocess
import uuid

import pytest
from runpod_emulator.backends.podman import variant_image
from runpod_emulator.doctor import DoctorFailure, ensure_pods_can_run

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The slowest modules of make pytest's three roots, slowest first (seconds on 2 busy cores, from --durations). With
# --dist loadfile --no-loadscope-reorder (the Makefile's) pytest-xdist hands modules out in collection order: a long
# module collected late runs alone at the end while the other process has nothing left. Longest first keeps both
# busy to the end.
SLOW_MODULES = (
    "tests/e2e/test_resume_drill.py",  # ~320 s: the six-mode drill and the runs after it
    "tests/e2e/test_own_trainer_drill.py",  # ~250 s: two drills
    "tests/e2e/test_hf_drill.py",  # ~220 s: a four-mode drill of a Trainer script with its venv
    "training/tests/test_crash_consistency.py",  # ~150 s: 50 killed trainer lives
    "tests/e2e/test_smoke_interrupts.py",
    "training/tests/test_hf_callback.py",
    "tests/e2e/test_teardown.py",
    "tests/e2e/test_runbook.py",
    "training/tests/test_resume_bitwise.py",
    "tests/e2e/test_pod_venv.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """SLOW_MODULES first, in that order; the rest keep theirs (a stable sort)."""
    rank = {path: index for index, path in enumerate(SLOW_MODULES)}

    def key(item: pytest.Item) -> int:
        try:
            return rank.get(item.path.relative_to(ROOT).as_posix(), len(rank))
        except ValueError:
            return len(rank)

    items.sort(key=key)


@pytest.fixture(scope="session")
def pod_image() -> str:
    """The tag of the local pod image, once `make doctor`'s checks pass (podman starts a pod, SSH works)."""
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "config" / "containers.conf"))
    try:
        return ensure_pods_can_run()
    except DoctorFailure as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def pod_image_no_rsync(pod_image: str) -> str:
    """The pod image's variant without rsync (emulator/image/variant.sh no-rsync, reused while its inputs are
    unchanged): what an emulator pod created with image `trainops/pod:no-rsync` runs."""
    done = subprocess.run([str(ROOT / "emulator" / "image" / "variant.sh"), "no-rsync"], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"emulator/image/variant.sh no-rsync failed: {(done.stdout + done.stderr).strip()[-2000:]}")
    return variant_image("no-rsync")


@pytest.fixture
def ssh_keypair(tmp_path: pathlib.Path) -> tuple[pathlib.Path, str]:
    """A freshly generated ed25519 key pair: (private key path, public key line)."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "trainops-test", "-f", str(key)], check=True)
    return key, key.with_suffix(".pub").read_text().strip()


@pytest.fixture
def container_name():
    """A unique container name, removed after the test whatever happened."""
    name = f"trainops-test-{uuid.uuid4().hex[:10]}"
    yield name
    subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, check=False)
