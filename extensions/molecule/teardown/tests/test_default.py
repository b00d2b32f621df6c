"""The teardown scenario's verifier: the checks only read. Every checkpoint is still in place, byte for byte as
written (sha256sum -c on the pod), nothing was moved aside, and nothing was written on the volume."""

from __future__ import annotations

import os

import pytest
import testinfra

CONTAINER = "trainops-molecule-teardown"
VOLUME = "/runpod-volume/trainops"


@pytest.fixture(scope="module")
def pod():
    os.environ.setdefault(
        "CONTAINERS_CONF", os.environ.get("MOLECULE_PROJECT_DIRECTORY", "") + "/config/containers.conf"
    )
    return testinfra.get_host(f"podman://{CONTAINER}")


@pytest.mark.parametrize("run_id", ["molecule-td", "molecule-td-torn"])
def test_checkpoints_untouched(pod, run_id):
    listed = pod.check_output(f"ls -A {VOLUME}/{run_id}/ckpt").split()
    # As the trainer left them: nothing moved aside (no .corrupt-*), nothing added.
    assert sorted(listed) == [".writer.lock", "latest", "step-00000002", "step-00000004"]
    for step in ("step-00000002", "step-00000004"):
        assert pod.run(f"cd {VOLUME}/{run_id}/ckpt/{step} && sha256sum --check --strict --quiet SHA256SUMS").rc == 0


def test_nothing_written_on_the_volume(pod):
    assert pod.check_output(f"ls -A {VOLUME}").split() == ["molecule-td", "molecule-td-torn"]
    newest_fixture = f"{VOLUME}/molecule-td-torn/ckpt/step-00000004/SHA256SUMS"
    assert pod.check_output(f"find {VOLUME} -newer {newest_fixture} -type f") == ""
