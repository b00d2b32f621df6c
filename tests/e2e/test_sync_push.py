"""The sync role's push (the sync_push action) against one real pod container over real SSH and rsync.

One container of the local pod image, started as the emulator starts pods, serves the module; every push is a
real `ansible-playbook` run of `trainops.gpu.sync` (`tasks_from: push`). What is checked: exactly the recorded
files arrive, an unchanged push moves and reads nothing, edits that keep size and mtime are caught on either
side, check mode writes nothing, and bad input or an unreachable pod fail before anything moves.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from runpod_emulator.backends.podman import run_command
from runpod_emulator.testing import ssh_run, wait_for_login

pytestmark = pytest.mark.podman

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "pushrun"
POD_RUN = f"/workspace/trainops/{RUN_ID}"
FILES = {
    "a.py": "print('a')\n",
    "pkg/b.py": "B = 2\n",
    "run.sh": "#!/bin/sh\necho run\n",
    "name with space.txt": "spaces\n",
    "-dash:colon.txt": "odd\n",
    ".gitignore": "*.log\n",
}


def git(repo: Path, *args: str) -> None:
    base = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.invalid", "-c",
            "init.defaultBranch=main", "-c", "commit.gpgsign=false"]  # fmt: skip
    subprocess.run([*base, *args], check=True, capture_output=True)


class Pod:
    def __init__(self, key: Path, port: int, tmp: Path):
        self.key = key
        self.port = port
        self.tmp = tmp
        self.src = tmp / "src"
        self.runs = tmp / "runs"
        self.inventory = tmp / "inventory.ini"
        self.inventory.write_text(
            f"pod ansible_host=127.0.0.1 ansible_port={port} ansible_user=root ansible_ssh_private_key_file={key} "
            "ansible_python_interpreter=/usr/bin/python3 "
            "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR'\n"
        )
        play = [{"hosts": "pod", "gather_facts": False, "tasks": [
            {"name": "Push", "ansible.builtin.include_role": {"name": "trainops.gpu.sync", "tasks_from": "push"}},
        ]}]  # fmt: skip
        self.playbook = tmp / "push.yml"
        self.playbook.write_text(json.dumps(play))

    def push(self, check: bool = False, **extra) -> tuple[int, dict, str]:
        """(rc, the sync_push task's result, everything printed)."""
        extra_vars = {"sync_run_id": RUN_ID, "sync_src": str(self.src), "sync_runs_dir": str(self.runs), **extra}
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                   ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"))  # fmt: skip
        command = ["ansible-playbook", "-i", str(self.inventory), str(self.playbook), "-e", json.dumps(extra_vars)]
        done = subprocess.run([*command, *(["--check"] if check else [])], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=180, check=False)  # fmt: skip
        printed = done.stdout + done.stderr
        report = json.loads(done.stdout[done.stdout.index("{") :])
        for task in report["plays"][0]["tasks"]:
            if task["task"]["name"].endswith("record, push and verify the source"):
                return done.returncode, task["hosts"]["pod"], printed
        return done.returncode, {}, printed

    def ssh(self, command: str) -> str:
        result = ssh_run(self.key, self.port, command, timeout_s=30)
        assert result.returncode == 0, f"{command}: {result.stderr}"
        return result.stdout


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    image = request.getfixturevalue("pod_image")
    tmp = tmp_path_factory.mktemp("syncpush")
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    name = f"trainops-test-syncpush-{os.getpid()}"
    args, env = run_command(image, name, env={"PUBLIC_KEY": key.with_suffix(".pub").read_text().strip()})
    subprocess.run(["podman", *args], env=env, check=True, capture_output=True, timeout=120)
    try:
        binding = subprocess.run(["podman", "port", name, "22/tcp"], check=True, capture_output=True, text=True)
        port = int(binding.stdout.strip().splitlines()[0].rpartition(":")[2])
        wait_for_login(key, port, 60)
        yield Pod(key, port, tmp)
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, check=False)


@pytest.fixture(scope="module")
def source(pod: Pod) -> Path:
    src = pod.src
    for name, text in FILES.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    (src / "run.sh").chmod(0o755)
    (src / "link.py").symlink_to("pkg/b.py")
    git(src, "init", "-q")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "first")
    (src / "debug.log").write_text("ignored\n")
    (src / "notes.txt").write_text("untracked, not ignored\n")
    return src


def same_size_edit(path: Path, text: str) -> None:
    """Replace a file's content with `text` of the same size and put its mtime back."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    path.write_text(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_push_sends_exactly_the_recorded_files_and_an_unchanged_push_moves_and_reads_nothing(pod, source):
    rc, first, printed = pod.push()
    assert rc == 0, printed
    recorded = (pod.runs / RUN_ID / "source.files").read_text().splitlines()
    assert sorted(recorded) == sorted([*FILES, "link.py", "notes.txt"])
    assert first["changed"] and first["verified"] and first["dirty"] is True
    assert first["files"] == len(recorded) and first["files_transferred"] == len(recorded) - 1  # the link is not a file
    assert first["files_verified"] == len(recorded) - 1
    listed = pod.ssh(f"cd {POD_RUN}/src && find . -type f -o -type l | sed 's|^./||' | LC_ALL=C sort").splitlines()
    assert listed == sorted(recorded, key=lambda n: n.encode())
    assert pod.ssh(f"cd {POD_RUN}/src && sha256sum --check --strict --quiet ../source.sha256 && echo ok") == "ok\n"
    assert pod.ssh(f"readlink {POD_RUN}/src/link.py; stat -c %a {POD_RUN}/src/run.sh") == "pkg/b.py\n755\n"
    manifest = (pod.runs / RUN_ID / "source.sha256").read_bytes()
    assert pod.ssh(f"sha256sum < {POD_RUN}/source.sha256").split()[0] == hashlib.sha256(manifest).hexdigest()
    assert not (pod.runs / RUN_ID / ".run.lock").exists()

    time.sleep(0.2)  # out of the racy window of the files rsync just wrote
    rc, second, printed = pod.push()
    assert rc == 0, printed
    assert not second["changed"] and second["bytes_transferred"] == 0 and second["itemized"] == []
    rc, third, printed = pod.push(ansible_python_interpreter="/usr/bin/env python3")  # an interpreter with arguments
    assert rc == 0, printed
    assert not third["changed"]
    assert third["files_hashed_on_pod"] == 0 and third["hash_stats"]["read"] == 0
    assert third["files_verified"] == first["files_verified"]
    assert set(third["timings"]) == {"provenance_s", "connect_wait_s", "rsync_s", "verify_s", "total_s"}


def test_an_edit_on_the_pod_that_keeps_size_and_mtime_fails_the_push_naming_it(pod, source):
    assert pod.push()[0] == 0
    pod.ssh(f"cd {POD_RUN}/src && t=$(stat -c %Y a.py) && printf \"print('A')\\n\" > a.py && touch -d @$t a.py")
    for mode in ("cached", "full"):
        rc, result, printed = pod.push(sync_push_verify=mode)
        assert rc != 0
        assert "1 pushed file(s) do not match" in result["msg"] and "a.py: sha256 differs" in result["msg"], printed
    pod.ssh(f"rm {POD_RUN}/src/a.py")
    rc, result, printed = pod.push()
    assert rc == 0 and result["files_transferred"] == 1, printed


def test_an_edit_on_the_controller_that_keeps_size_and_mtime_is_recorded_and_caught(pod, source):
    assert pod.push()[0] == 0
    same_size_edit(source / "pkg" / "b.py", "B = 3\n")
    rc, result, printed = pod.push()
    # The record has the new hash (ctime changed: the controller's cache misses); rsync's quick check does not
    # resend a file of the same size and mtime; the pod's check names it.
    assert rc != 0 and "pkg/b.py: sha256 differs" in result["msg"], printed
    recorded = json.loads((pod.runs / RUN_ID / "provenance.json").read_text())["source"]["files"]
    entry = next(e for e in recorded if e["path"] == "pkg/b.py")
    assert entry["sha256"] == hashlib.sha256(b"B = 3\n").hexdigest()
    pod.ssh(f"rm {POD_RUN}/src/pkg/b.py")
    rc, result, printed = pod.push()
    assert rc == 0 and result["files_transferred"] == 1, printed


def test_check_mode_reports_what_would_move_and_writes_nothing(pod, source):
    assert pod.push()[0] == 0
    record = (pod.runs / RUN_ID / "provenance.json").read_bytes()
    (source / "a.py").write_text("print('a changed')\n")
    try:
        rc, result, printed = pod.push(check=True)
        assert rc == 0, printed
        assert result["changed"] and not result["verified"] and result["files_verified"] is None
        assert any(line.endswith(" a.py") for line in result["itemized"]), result["itemized"]
        assert (pod.runs / RUN_ID / "provenance.json").read_bytes() == record
        assert pod.ssh(f"cat {POD_RUN}/src/a.py") == FILES["a.py"]
    finally:
        (source / "a.py").write_text(FILES["a.py"])


def test_bad_source_held_lock_and_unreachable_pod_fail_before_anything_moves(pod, source, tmp_path):
    rc, _result, printed = pod.push(sync_src=str(tmp_path / "missing"), sync_run_id="other")
    assert rc != 0 and "is not a directory on the controller" in printed
    assert not (pod.runs / "other").exists()

    lock = pod.runs / RUN_ID / ".run.lock"
    lock.mkdir(parents=True)
    (lock / "owner").write_text(f"host=elsewhere\npid=1\ntime={int(time.time())}\nsince=2026-12-03T00:00:00Z\n")
    try:
        rc, _result, printed = pod.push()
        assert rc != 0 and "is held by another controller (host=elsewhere pid=1" in printed, printed
    finally:
        (lock / "owner").unlink()
        lock.rmdir()

    rc, result, printed = pod.push(ansible_port=1)  # nothing listens on 127.0.0.1:1
    assert rc != 0 and "cannot reach root@127.0.0.1 over SSH" in result.get("msg", printed), printed
    assert not lock.exists()
