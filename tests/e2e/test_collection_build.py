"""The collection builds into an artifact that installs, without the checkout's local state."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tarfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
ANSIBLE_GALAXY = str(pathlib.Path(sys.executable).with_name("ansible-galaxy"))


def test_build_and_install(tmp_path: pathlib.Path):
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    # Local state that must never ship, present in the checkout during the build.
    (ROOT / "runs").mkdir(exist_ok=True)
    (ROOT / "tests" / "output").mkdir(parents=True, exist_ok=True)

    subprocess.run(
        [ANSIBLE_GALAXY, "collection", "build", "--output-path", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    artifact = tmp_path / f"trainops-gpu-{galaxy['version']}.tar.gz"
    assert artifact.is_file()

    with tarfile.open(artifact) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("MANIFEST.json"))
    assert manifest["collection_info"]["version"] == galaxy["version"]
    assert manifest["collection_info"]["dependencies"] == galaxy["dependencies"]
    shipped_roots = {name.split("/")[0] for name in names}
    for local_state in (".venv", ".cache", "collections", "runs", ".git", "state"):
        assert local_state not in shipped_roots, f"{local_state} is in the collection artifact"
    assert not [n for n in names if n.startswith("tests/output")]
    assert not [n for n in names if "__pycache__" in n]
    assert "meta/runtime.yml" in names

    # --no-deps: ansible.posix comes from the ansible wheel here, Galaxy is unreachable.
    subprocess.run(
        [ANSIBLE_GALAXY, "collection", "install", "--no-deps", "-p", str(tmp_path / "installed"), str(artifact)],
        check=True,
        capture_output=True,
    )
    listed = subprocess.run(
        [ANSIBLE_GALAXY, "collection", "list", "trainops.gpu", "-p", str(tmp_path / "installed"), "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    found = {name: info for paths in json.loads(listed.stdout).values() for name, info in paths.items()}
    assert found["trainops.gpu"]["version"] == galaxy["version"]
