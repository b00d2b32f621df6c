"""The resume drill playbook run by the e2e tests: one emulator, an SSH key and a runs directory for the
playbook's runs, and readers of its output (test_resume_drill.py, test_own_trainer_drill.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from runpod_emulator.testing import EmulatorProcess, ansible_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MUTATING = ("POST", "PUT", "PATCH", "DELETE")
# Whole drill bound: about 3-4 minutes on an idle 2-core machine; a loaded one takes longer.
DRILL_TIMEOUT_S = 900


class Drill:
    """One emulator, an SSH key and a runs directory for the playbook's runs."""

    def __init__(self, emulator: EmulatorProcess, tmp: Path):
        self.emulator = emulator
        self.tmp = tmp
        self.runs = tmp / "runs"
        self.key = tmp / "key" / "id_ed25519"
        self.src = tmp / "src"

    def env(self) -> dict[str, str]:
        return ansible_env(self.emulator.url, self.emulator.api_key, RUNPOD_SSH_PRIVATE_KEY=str(self.key))

    def command(self, extra_vars: dict[str, Any], *args: str) -> list[str]:
        extra_vars = {
            "resume_drill_src": str(self.src),
            "resume_drill_runs_dir": str(self.runs),
            "resume_drill_ssh_private_key": str(self.key),
            **extra_vars,
        }
        return [
            str(BIN / "ansible-playbook"),
            "-i",
            str(ROOT / "inventories" / "local.runpod.yml"),
            str(ROOT / "playbooks" / "resume_drill.yml"),
            "-e",
            json.dumps(extra_vars),
            *args,
        ]

    def run(self, extra_vars: dict[str, Any], *args: str, timeout: float = DRILL_TIMEOUT_S):
        return subprocess.run(
            self.command(extra_vars, *args),
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def api(self, path: str) -> tuple[int, Any]:
        status, _headers, body = self.emulator.api("GET", path)
        return status, body

    def pods_of(self, run_id: str) -> list[dict[str, Any]]:
        status, body = self.api("/v2/pods")
        assert status == 200, body
        return [p for p in body["pods"] if p["name"].startswith(f"trainops-{run_id}-")]

    def volumes_of(self, run_id: str) -> list[dict[str, Any]]:
        status, body = self.api("/v2/network-volumes")
        assert status == 200, body
        volumes = body if isinstance(body, list) else body.get("networkVolumes", body.get("items", []))
        return [v for v in volumes if v["name"] == f"trainops-{run_id}-drill"]

    def mutating_requests(self) -> int:
        requests = self.emulator.admin("GET", "/_emulator/requests")["requests"]
        return sum(1 for r in requests if r["method"] in MUTATING)


def explain(done: subprocess.CompletedProcess[str]) -> str:
    failed = [line for line in done.stdout.splitlines() if "fatal:" in line or "FAILED" in line]
    return f"rc={done.returncode}\n" + "\n".join(failed[-10:]) + f"\n{done.stdout[-5000:]}\n{done.stderr[-2000:]}"


def recap(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host."""
    found = {}
    for line in done.stdout.splitlines():
        match = re.match(r"^(\S+)\s+:\s+(.*)$", line)
        if match and "ok=" in match.group(2):
            found[match.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(2))}
    return found


def changed_tasks(done: subprocess.CompletedProcess[str]) -> list[str]:
    """Names of the tasks that reported a change."""
    found, task = [], ""
    for line in done.stdout.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("changed:"):
            found.append(f"{task} {line}")
    return found


def commit_tree(src: Path) -> None:
    """Make src a git work tree with everything in it committed: the drill pushes and records a git tree."""
    git = ["git", "-C", str(src), "-c", "user.name=drill", "-c", "user.email=drill@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "trainer"], check=True)
