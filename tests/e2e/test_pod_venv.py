"""The pod_venv module really run by ansible-playbook, on this machine as its target (its Debian python3 as the
pod's): a venv keyed by the requirements and the Python, built from a local wheel directory (no index), reused,
rebuilt when the file changes, never used half-built, and refusing what would replace torch before installing."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runpod_emulator.testing import ansible_env
from wheels import write_wheel

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
SYSTEM_PYTHON = "/usr/bin/python3"

PLAYBOOK = """
- name: pod_venv
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The requirements' venv
      trainops.gpu.pod_venv:
        requirements: "{{ requirements }}"
        root: "{{ root }}"
        python: "{{ system_python }}"
        pip_args: [--no-index, --find-links, "{{ wheels }}"]
        cache_dir: "{{ cache }}"
        timeout: 300
      register: venv
      ignore_errors: true
    - name: What it returned
      ansible.builtin.copy:
        content: "{{ venv | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
      check_mode: false
"""


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("pod-venv")
    wheels = tmp / "wheels"
    wheels.mkdir()
    write_wheel(wheels, "tinydep", "1.0", source="ANSWER = 42\n")
    write_wheel(wheels, "needs-old-torch", "1.0", requires=("torch==1.0.0",), source="")
    write_wheel(wheels, "torch", "1.0.0", source="")  # what pip would install in place of the image's torch
    return tmp


def _playbook(place: Path, *args: str) -> list[str]:
    """ansible-playbook of venv.yml with vars.json (both written by _venv) on this machine."""
    playbook = str(BIN / "ansible-playbook")
    return [playbook, "-i", "localhost,", "-c", "local", str(place / "venv.yml"), "-e", f"@{place}/vars.json", *args]


def _venv(place: Path, requirements: str, *args: str) -> dict:
    out = place / "out.json"
    if out.exists():
        out.unlink()
    variables = {
        "requirements": requirements,
        "root": str(place / "venvs"),
        "wheels": str(place / "wheels"),
        "cache": str(place / "pip-cache"),
        "system_python": SYSTEM_PYTHON,
        "out": str(out),
        "ansible_python_interpreter": SYSTEM_PYTHON,
    }
    (place / "vars.json").write_text(json.dumps(variables))
    (place / "venv.yml").write_text(PLAYBOOK)
    done = subprocess.run(
        _playbook(place, *args),
        env=ansible_env("http://127.0.0.1:9", "unused"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return json.loads(out.read_text())


def test_built_once_then_reused_and_a_changed_file_gets_its_own(place: Path):
    built = _venv(place, "tinydep==1.0\n")
    assert built["state"] == "built" and built["changed"] and not built.get("failed"), built
    assert built["installed"] == ["tinydep==1.0"] and "tinydep==1.0" in built["freeze"], built
    answer = subprocess.run(
        [built["python"], "-c", "import tinydep; print(tinydep.ANSWER)"], capture_output=True, text=True, check=True
    )
    assert answer.stdout.strip() == "42"
    # --system-site-packages: the system's packages are seen from the venv (the image's torch, on a pod)
    subprocess.run([built["python"], "-c", "import pip"], check=True)
    again = _venv(place, "tinydep==1.0\n")
    assert again["state"] == "reused" and not again["changed"] and again["venv_dir"] == built["venv_dir"], again
    assert again["installed"] == [] and again["freeze"] == built["freeze"]
    checked = _venv(place, "tinydep==1.0\n# a second revision of the file\n", "--check")
    assert checked["state"] == "would_build" and not Path(checked["venv_dir"]).exists(), checked
    changed = _venv(place, "tinydep==1.0\n# a second revision of the file\n")
    assert changed["state"] == "built" and changed["key"] != built["key"], changed
    assert Path(built["venv_dir"]).is_dir()  # the earlier file's venv stays for whoever still uses it


def test_a_half_built_venv_is_built_again_never_used(place: Path):
    first = _venv(place, "tinydep==1.0\n# half\n", "--check")
    left = Path(first["venv_dir"])
    (left / "bin").mkdir(parents=True)
    (left / "bin" / "python").symlink_to(SYSTEM_PYTHON)  # what a build killed before its marker leaves
    (left / "half-installed.txt").write_text("")
    built = _venv(place, "tinydep==1.0\n# half\n")
    assert built["state"] == "built" and not (left / "half-installed.txt").exists(), built
    assert (left / ".trainops-venv.json").is_file()


def _process_tree(root: int) -> set[int]:
    """root and every live descendant (by parent pid: ansible's workers start sessions of their own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":  # a zombie is dead already
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, []))
    return tree


def _kill_tree(root: int) -> set[int]:
    """SIGKILL the playbook and every process under it at once, as a pod stopped mid-build kills them: each is
    stopped first (a stopped process forks nothing and none is reparented), then all are killed."""
    stopped: set[int] = set()
    while (tree := _process_tree(root)) - stopped:
        for pid in tree - stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= tree
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return stopped


def test_a_build_killed_midway_is_built_again_never_used(place: Path):
    requirements = "tinydep==1.0\n# killed\n"
    path = Path(_venv(place, requirements, "--check")["venv_dir"])  # also writes vars.json and venv.yml for it
    playbook = subprocess.Popen(
        _playbook(place),
        env=ansible_env("http://127.0.0.1:9", "unused"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        # The venv exists (its interpreter) and pip has not finished: the marker is written after pip's install
        # and freeze, seconds later.
        while not (path / "bin" / "python").exists():
            assert playbook.poll() is None and time.monotonic() < deadline, "the build ended before it was seen"
            time.sleep(0.01)
        assert len(_kill_tree(playbook.pid)) > 2  # the playbook, its worker, the module and what it runs
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(playbook.pid, signal.SIGKILL)
        playbook.wait(timeout=30)
    assert path.is_dir() and not (path / ".trainops-venv.json").exists(), "killed after its marker: not mid-build"
    # Never used: a check run says it would build, a run builds it again and only then is it complete.
    assert _venv(place, requirements, "--check")["state"] == "would_build"
    built = _venv(place, requirements)
    assert built["state"] == "built" and built["installed"] == ["tinydep==1.0"], built
    assert (path / ".trainops-venv.json").is_file()
    answer = subprocess.run(
        [built["python"], "-c", "import tinydep; print(tinydep.ANSWER)"], capture_output=True, text=True, check=True
    )
    assert answer.stdout.strip() == "42"


def test_what_would_replace_torch_is_refused_before_installing(place: Path):
    named = _venv(place, "tinydep==1.0\ntorch==2.0  # pinned by mistake\n-r base.txt\n")
    assert named.get("failed") and "requirements.txt line 2 asks for torch" in named["msg"], named
    assert "line 3 names another file (-r base.txt)" in named["msg"], named
    pulled = _venv(place, "needs-old-torch==1.0\n")
    assert pulled.get("failed"), pulled
    assert "would install torch 1.0.0 (required by needs-old-torch 1.0)" in pulled["msg"], pulled["msg"]
    assert not Path(pulled["venv_dir"]).exists(), "a refused venv is not left behind"
    leftovers = [p for p in (place / "venvs").iterdir() if p.is_dir()]
    assert all((p / ".trainops-venv.json").is_file() for p in leftovers), leftovers
    shutil.rmtree(place / "pip-cache", ignore_errors=True)
    assert os.path.isdir(place / "venvs")
