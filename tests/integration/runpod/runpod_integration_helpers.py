"""Helpers for the RunPod modules' and inventory's integration tests (the fixtures are in conftest.py).

Test modules import from here, never from `conftest`: several test directories have a conftest.py and only one
of them can be the module `conftest` when pytest collects them together.

Everything runs for real: the emulator as a subprocess on 127.0.0.1, ansible-playbook, ansible-inventory and
ansible as subprocesses of this checkout's virtual environment. Nothing of the collection is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Installed editable in the virtual environment (pip install -e emulator).
from runpod_emulator.testing import EmulatorProcess
from runpod_emulator.testing import ansible_env as emulator_ansible_env

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
BIN = Path(sys.executable).parent

MUTATING = ("POST", "PUT", "PATCH", "DELETE")


def load_collection() -> None:
    """Make `ansible_collections.trainops.gpu` importable in this process as the ansible CLIs do: ansible's
    collection loader over this checkout's collections/ (idempotent; sys.path is left alone)."""
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader([str(ROOT / "collections")])


@dataclass
class AnsibleRun:
    """One ansible-playbook run: exit code, output, and per-task results from the json callback."""

    rc: int
    stdout: str
    stderr: str
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def tasks(self) -> list[dict[str, Any]]:
        found = []
        for play in self.report.get("plays", []):
            for task in play.get("tasks", []):
                result = task.get("hosts", {}).get("localhost", {})
                found.append({"name": task["task"]["name"], **result})
        return found

    def task(self, name: str) -> dict[str, Any]:
        matches = [t for t in self.tasks if t["name"] == name]
        assert matches, f"no task named {name!r} in {[t['name'] for t in self.tasks]}"
        return matches[-1]

    @property
    def stats(self) -> dict[str, int]:
        return self.report.get("stats", {}).get("localhost", {})

    def explain(self) -> str:
        failed = [t for t in self.tasks if t.get("failed")]
        return f"rc={self.rc}\nfailed tasks: {json.dumps(failed, indent=1)[:4000]}\nstderr: {self.stderr[-3000:]}"


def ansible_env(emulator: EmulatorProcess, api_key: str | None = None, **extra: str) -> dict[str, str]:
    """runpod_emulator.testing.ansible_env for `emulator`, with its key unless `api_key` is given."""
    return emulator_ansible_env(emulator.url, api_key if api_key is not None else emulator.api_key, **extra)


def run_playbook(
    emulator: EmulatorProcess,
    playbook: str,
    extra_vars: dict[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    api_key: str | None = None,
    timeout_s: float = 300,
) -> AnsibleRun:
    env = ansible_env(emulator, api_key, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    command = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(PLAYBOOKS / playbook)]
    command += ["-e", json.dumps({"ansible_python_interpreter": sys.executable, **(extra_vars or {})})]
    if check:
        command.append("--check")
    if diff:
        command.append("--diff")
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    try:
        report = json.loads(done.stdout[done.stdout.index("{") :])
    except ValueError:
        report = {}
    return AnsibleRun(done.returncode, done.stdout, done.stderr, report)


def unwrap(value: Any) -> Any:
    """ansible-inventory marks strings it did not template; read through those markers."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def run_inventory(emulator: EmulatorProcess, source: Path, *args: str, **env: str) -> tuple[dict[str, Any], str]:
    command = [str(BIN / "ansible-inventory"), "-i", str(source), "--list", *args]
    done = subprocess.run(
        command, cwd=ROOT, env=ansible_env(emulator, **env), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    # With -v, messages precede the JSON document on stdout.
    start = 0 if done.stdout.startswith("{") else done.stdout.index("\n{") + 1
    return unwrap(json.loads(done.stdout[start:])), done.stdout + done.stderr


def create_pod_directly(emulator: EmulatorProcess, name: str, **extra: Any) -> dict[str, Any]:
    """A pod made through the API, past the modules (one RTX 4090 of the local pod image)."""
    body = {"name": name, "image": "localhost/trainops-pod", "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1}}
    body.update(extra)
    status, _headers, pod = emulator.api("POST", "/v2/pods", body)
    assert status == 201, pod
    return pod


def recorded(emulator: EmulatorProcess) -> list[dict[str, Any]]:
    return emulator.admin("GET", "/_emulator/requests")["requests"]


def live_pods(emulator: EmulatorProcess) -> list[dict[str, Any]]:
    status, _headers, body = emulator.api("GET", "/v2/pods")
    assert status == 200, body
    return [p for p in body["pods"] if p["status"] != "TERMINATED"]


def spec_path() -> Path | None:
    """RunPod's official OpenAPI document: <repo root>/../shared/runpod/openapi-v2.json, else /work/shared/..."""
    for candidate in (
        ROOT.parent / "shared" / "runpod" / "openapi-v2.json",
        Path("/work/shared/runpod/openapi-v2.json"),
    ):
        if candidate.is_file():
            return candidate
    return None


def spec_violations(openapi, requests: list[dict[str, Any]]) -> list[str]:
    """Each recorded request checked against the official spec: path, method, query and body."""
    from urllib.parse import parse_qsl

    from openapi_core.testing import MockRequest

    problems = []
    for sent in requests:
        body = None if sent.get("body") is None else json.dumps(sent["body"]).encode()
        request = MockRequest(
            "https://api.runpod.io",
            sent["method"],
            sent["path"],
            args=parse_qsl(sent.get("query_string") or "", keep_blank_values=True),
            headers={"Authorization": "Bearer key", **({"Content-Type": "application/json"} if body else {})},
            data=body,
        )
        try:
            openapi.validate_request(request)
        except Exception as exc:  # every validation failure is reported, whatever its class
            cause = exc.__cause__
            details = list(getattr(cause, "schema_errors", None) or ([cause] if cause is not None else []))
            problems.append(f"{sent['method']} {sent['path']}?{sent.get('query_string')}: {exc}; {details}")
    return problems
