"""The API key never lands in a file on the controller, interrupted or not.

Without pipelining, Ansible writes every module with its arguments (the API key among them) to
``<remote_tmp>/ansible-tmp-*/AnsiballZ_<module>.py`` and removes it once the task returns; a Ctrl-C during the task
leaves it there. The local connection does not read ``[ssh_connection] pipelining``: the collection's ansible.cfg
sets ``[connection] pipelining`` and its playbooks ``ansible_pipelining`` (playbooks/group_vars/all.yml). Each run
here gets fresh ANSIBLE_HOME, ANSIBLE_LOCAL_TEMP, ANSIBLE_REMOTE_TEMP, TMPDIR and HOME under the test's tmp_path,
and every file under them is searched for the key afterwards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runpod_emulator.testing import LOCAL_INVENTORY, default_signals
from runpod_integration_helpers import BIN, PLAYBOOKS, ROOT, ansible_env, live_pods, recorded

# What -vvv prints for a module file written to the controller's disk (a non-pipelined task).
MODULE_FILE_PUT = re.compile(r"PUT \S+ TO \S*AnsiballZ_\w+\.py")


def temp_env(emulator, tmp_path: Path, **extra: str) -> dict[str, str]:
    """ansible_env with every directory Ansible (and the module's AnsiballZ wrapper) writes to under tmp_path."""
    dirs = {name: tmp_path / name for name in ("home", "ansible_home", "local_tmp", "remote_tmp", "tmp")}
    for directory in dirs.values():
        directory.mkdir(parents=True)
    return ansible_env(
        emulator,
        HOME=str(dirs["home"]),
        ANSIBLE_HOME=str(dirs["ansible_home"]),
        ANSIBLE_LOCAL_TEMP=str(dirs["local_tmp"]),
        ANSIBLE_REMOTE_TEMP=str(dirs["remote_tmp"]),
        TMPDIR=str(dirs["tmp"]),
        **extra,
    )


def files_with(root: Path, secret: str) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()
    )


def playbook_command(tmp_path: Path, *args: str) -> list[str]:
    extra = {"ansible_python_interpreter": sys.executable, "state_file": str(tmp_path / "runs" / "disk" / "state.json")}
    return [
        str(BIN / "ansible-playbook"),
        "-i",
        str(LOCAL_INVENTORY),
        str(PLAYBOOKS / "key_on_disk.yml"),
        "-e",
        json.dumps(extra),
        *args,
    ]


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("pipelining", ["ansible.cfg", "off (control)"])
def test_ctrl_c_during_the_create_leaves_no_file_with_the_key(emulator, tmp_path, pipelining):
    # The create answers after 4 s; Ctrl-C (SIGINT to the whole process group) comes while it is in flight.
    emulator.admin(
        "POST",
        "/_emulator/faults",
        {"kind": "latency", "latency_ms": 4000, "count": 1, "method": "POST", "path_prefix": "/v2/pods"},
    )
    args = ["-e", "ansible_pipelining=false"] if pipelining.startswith("off") else []
    process = subprocess.Popen(
        playbook_command(tmp_path, *args),
        cwd=ROOT,
        env=temp_env(emulator, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, which SIGINT reaches as Ctrl-C in a terminal does
        preexec_fn=default_signals,  # SIGINT at SIG_DFL, even when this test run inherited it ignored
    )
    try:
        # The rule is used up when the create reaches the emulator, before its pause.
        wait_until(lambda: not emulator.admin("GET", "/_emulator/faults")["faults"], 60, "the create call")
        time.sleep(0.5)
        assert process.poll() is None, "the play ended before the interrupt"
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode != 0 and "PLAY RECAP" not in out, out[-3000:] + err[-3000:]
    # Interrupted inside the create: the pod exists (record_to held SIGINT until it was recorded).
    wait_until(lambda: live_pods(emulator), 10, "the pod's creation")
    assert [r["status"] for r in recorded(emulator) if r["method"] == "POST" and r["path"] == "/v2/pods"] == [201]
    leaked = files_with(tmp_path, emulator.api_key)
    if pipelining == "ansible.cfg":
        assert leaked == [], f"files holding the API key after Ctrl-C: {leaked}"
    else:
        # The control: the same run without pipelining leaves the module file, key and all. The search sees it.
        assert any(re.search(r"ansible-tmp-[^/]+/AnsiballZ_runpod_pod\.py$", name) for name in leaked), leaked


def test_a_run_to_the_end_writes_no_module_file_and_leaves_no_key(emulator, tmp_path):
    done = subprocess.run(
        playbook_command(tmp_path, "-vvv"),
        cwd=ROOT,
        env=temp_env(emulator, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert "ESTABLISH LOCAL CONNECTION" in done.stdout
    assert MODULE_FILE_PUT.findall(done.stdout) == []  # every task pipelined
    assert live_pods(emulator) == []
    assert files_with(tmp_path, emulator.api_key) == []
    assert emulator.api_key not in done.stdout + done.stderr


@pytest.mark.slow
def test_the_playbooks_pipeline_under_another_ansible_cfg(emulator, tmp_path):
    # A user's own ansible.cfg that knows nothing of pipelining: playbooks/group_vars/all.yml still makes the
    # collection's playbooks pipeline. The audit is one (read only); the control shows the check can fail.
    config = tmp_path / "user.cfg"
    config.write_text("[defaults]\nretry_files_enabled = False\n")
    runs = tmp_path / "runs"
    outputs = {}
    for case, args in (("group_vars", []), ("control", ["-e", "ansible_pipelining=false"])):
        command = [str(BIN / "ansible-playbook"), "-i", "localhost,", str(ROOT / "playbooks" / "audit.yml"), "-vvv"]
        command += ["-e", json.dumps({"audit_runs_dir": str(runs)}), *args]
        done = subprocess.run(
            command,
            cwd=tmp_path,
            env=temp_env(emulator, tmp_path / case, ANSIBLE_CONFIG=str(config)),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
        outputs[case] = MODULE_FILE_PUT.findall(done.stdout)
    assert outputs["group_vars"] == []
    assert any("AnsiballZ_runpod_audit_info.py" in put for put in outputs["control"]), outputs["control"]
    assert files_with(tmp_path, emulator.api_key) == []
