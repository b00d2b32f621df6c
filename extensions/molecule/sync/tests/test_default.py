"""The sync scenario's verifier: real files and hashes on the pod (podman connection) and the controller."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import testinfra

CONTAINER = "trainops-molecule-sync"
RUN_ID = "molecule-sync"
POD_RUN = f"/workspace/trainops/{RUN_ID}"
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
SRC = EPHEMERAL / "src"
LOCAL_RUN = EPHEMERAL / "runs" / RUN_ID


@pytest.fixture(scope="module")
def pod():
    os.environ.setdefault(
        "CONTAINERS_CONF", os.environ.get("MOLECULE_PROJECT_DIRECTORY", "") + "/config/containers.conf"
    )
    return testinfra.get_host(f"podman://{CONTAINER}")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(path: Path) -> dict[str, str]:
    """A coreutils sha256sum file as {path: hash}."""
    entries = {}
    for line in path.read_text().splitlines():
        digest, name = line.split("  ", 1)
        entries[name] = digest
    return entries


def test_pushed_tree_is_the_recorded_one(pod):
    recorded = manifest(LOCAL_RUN / "source.sha256")
    assert set(recorded) == {".gitignore", "README.md", "pkg/__init__.py", "pkg/model.py", "run.sh",
                             "config/train.json", "notes.txt"}  # fmt: skip
    listed = pod.check_output(f"cd {POD_RUN}/src && find . -type f -o -type l | sed 's|^./||' | LC_ALL=C sort")
    assert listed.splitlines() == sorted((LOCAL_RUN / "source.files").read_text().splitlines())
    for name, digest in recorded.items():
        assert pod.file(f"{POD_RUN}/src/{name}").sha256sum == digest == sha256(SRC / name)
    assert pod.run(f"cd {POD_RUN}/src && sha256sum --check --strict --quiet ../source.sha256").rc == 0


def test_ignored_files_stay_home_and_modes_and_links_travel(pod):
    assert not pod.file(f"{POD_RUN}/src/debug.log").exists
    assert not pod.file(f"{POD_RUN}/src/.git").exists
    link = pod.file(f"{POD_RUN}/src/model_link.py")
    assert link.is_symlink and link.linked_to == f"{POD_RUN}/src/pkg/model.py"
    assert pod.file(f"{POD_RUN}/src/run.sh").mode == 0o755
    assert pod.file(f"{POD_RUN}/source.sha256").sha256sum == sha256(LOCAL_RUN / "source.sha256")


def test_pulled_logs_and_job_files_match_the_pod(pod):
    pulled = manifest(LOCAL_RUN / "pull.sha256")
    assert {name.split("/")[0] for name in pulled} == {"logs", "job"}
    assert {"logs/result.json", "logs/metrics.jsonl", "job/train/exit_code", "job/train/output.log"} <= set(pulled)
    assert pod.file(f"{POD_RUN}/pull.sha256").sha256sum == sha256(LOCAL_RUN / "pull.sha256")
    for name, digest in pulled.items():
        assert sha256(LOCAL_RUN / name) == digest == pod.file(f"{POD_RUN}/{name}").sha256sum


def test_pulled_checkpoint_is_the_newest_and_verifies(pod):
    local_ckpt = LOCAL_RUN / "ckpt"
    assert sorted(p.name for p in local_ckpt.iterdir()) == ["step-00000004"]
    step = local_ckpt / "step-00000004"
    sums = manifest(step / "SHA256SUMS")
    assert sums
    for name, digest in sums.items():
        assert sha256(step / name) == digest == pod.file(f"{POD_RUN}/ckpt/step-00000004/{name}").sha256sum
    assert (step / "manifest.json").read_bytes() == pod.file(f"{POD_RUN}/ckpt/step-00000004/manifest.json").content


def test_nothing_remote_was_deleted_and_the_lock_is_gone(pod):
    assert pod.file(f"{POD_RUN}/ckpt/step-00000002/SHA256SUMS").exists
    assert pod.file(f"{POD_RUN}/ckpt/latest").exists
    assert not (LOCAL_RUN / ".run.lock").exists()
