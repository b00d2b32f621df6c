"""Secrets in a pod's env never reach a module result, an inventory variable, -vvv output or a run file.

A pod is created with a secret-named variable given in ``env`` (HF_TOKEN), a plainly named one given in
``secret_env`` and the create token; RunPod (the emulator) keeps them and returns them with every GET /v2/pods.
Each value, and the API key, is then looked for in every module's result (json callback), in a ``-vvv`` run of
the same play, in every file under its runs/ directory, and in ``ansible-inventory --list`` (``-vvv`` too) of the
collection's two inventory files and the inventory cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from runpod_integration_helpers import BIN, PLAYBOOKS, ROOT, ansible_env, recorded

INVENTORIES = (ROOT / "inventories" / "local.runpod.yml", ROOT / "inventories" / "runpod.runpod.yml")
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAISecretsTestKeySecretsTestKeySecrets01 sec@test"


def markers() -> dict[str, str]:
    return {"hf_token": f"marker-{uuid.uuid4().hex}", "plain_secret": f"marker-{uuid.uuid4().hex}"}


def leaks(text: str, secrets: dict[str, str]) -> list[str]:
    return sorted(name for name, value in secrets.items() if value in text)


def files_holding(root: Path, secrets: dict[str, str]) -> list[str]:
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(root)}: {name}" for name, value in secrets.items() if value.encode() in data]
    return found


def run_secrets_play(emulator, tmp_path: Path, run_id: str, secrets: dict[str, str], *args: str, **env: str):
    src = tmp_path / f"src-{run_id}"
    src.mkdir()
    (src / "train.py").write_text("print('train')\n")
    extra = {
        "ansible_python_interpreter": sys.executable,
        "run_id": run_id,
        "runs_dir": str(tmp_path / "runs"),
        "src_dir": str(src),
        "hf_token": secrets["hf_token"],
        "plain_secret": secrets["plain_secret"],
    }
    command = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(PLAYBOOKS / "secrets.yml")]
    return subprocess.run(
        [*command, "--diff", "-e", json.dumps(extra), *args],
        cwd=ROOT,
        env=ansible_env(emulator, **env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def create_tokens(emulator) -> dict[str, str]:
    """The create tokens the module sent (RunPod keeps them in the pod's env)."""
    bodies = [r["body"] for r in recorded(emulator) if r["method"] == "POST" and r["path"] == "/v2/pods"]
    return {f"create token {i}": b["env"]["TRAINOPS_CREATE_TOKEN"] for i, b in enumerate(bodies)}


@pytest.mark.slow
def test_no_result_output_or_run_file_holds_a_secret_of_the_pod_env(emulator, tmp_path):
    secrets = markers()
    results = run_secrets_play(emulator, tmp_path, "sec-json", secrets, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    assert results.returncode == 0, results.stdout[-4000:] + results.stderr[-3000:]
    report = json.loads(results.stdout[results.stdout.index("{") :])
    tasks = [task for play in report["plays"] for task in play["tasks"]]
    assert len(tasks) == 10 and all("localhost" in t["hosts"] for t in tasks)
    verbose = run_secrets_play(emulator, tmp_path, "sec-vvv", secrets, "-vvv")
    assert verbose.returncode == 0, verbose.stdout[-4000:] + verbose.stderr[-3000:]
    assert "ESTABLISH LOCAL CONNECTION" in verbose.stdout  # really -vvv

    # Not vacuous: the pods were created with the secrets in their env, and the token with them.
    creates = [r["body"] for r in recorded(emulator) if r["method"] == "POST" and r["path"] == "/v2/pods"]
    assert len(creates) == 2
    for body in creates:
        assert body["env"]["HF_TOKEN"] == secrets["hf_token"]
        assert body["env"]["PLAIN_SETTING"] == secrets["plain_secret"]
    # The updates sent the env again, secrets included (RunPod's PATCH replaces env as a whole).
    patches = [r["body"] for r in recorded(emulator) if r["method"] == "PATCH"]
    assert len(patches) == 2 and all(p["env"]["HF_TOKEN"] == secrets["hf_token"] for p in patches)

    hunted = dict(secrets, api_key=emulator.api_key, **create_tokens(emulator))
    assert leaks(results.stdout + results.stderr, hunted) == []
    assert leaks(verbose.stdout + verbose.stderr, hunted) == []
    runs = tmp_path / "runs"
    assert {p.name for p in runs.iterdir()} >= {"sec-json", "sec-vvv"}
    assert (runs / "sec-json" / "state.json").is_file() and (runs / "sec-json" / "provenance.json").is_file()
    assert files_holding(runs, hunted) == []
    # What the results do say: the names of the variables, and that HF_TOKEN was redacted in the provenance.
    info = next(t for t in tasks if t["task"]["name"] == "Read it by name")["hosts"]["localhost"]
    assert {"HF_TOKEN", "PLAIN_SETTING", "RUN_ID"} <= set(info["pods"][0]["env_keys"])
    provenance = json.loads((runs / "sec-json" / "provenance.json").read_text())
    assert provenance["env_redacted"] == ["HF_TOKEN"]


def test_inventory_variables_and_cache_hold_no_secret_of_the_pod_env(emulator, tmp_path):
    secrets = dict(markers(), create_token=uuid.uuid4().hex)
    assert emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [SSH_KEY]})[0] == 200
    body = {
        "name": "trainops-inv1-trainer",
        "image": "localhost/trainops-pod",
        "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
        "ports": ["22/tcp"],
        "startSsh": True,
        "env": {
            "HF_TOKEN": secrets["hf_token"],
            "PLAIN_SETTING": secrets["plain_secret"],
            "TRAINOPS_CREATE_TOKEN": secrets["create_token"],
        },
    }
    status, _headers, pod = emulator.api("POST", "/v2/pods", body)
    assert status == 201, pod
    emulator.wait_for(pod["id"], lambda p: p["ssh"]["direct"] is not None, 30)
    hunted = dict(secrets, api_key=emulator.api_key)
    cache = tmp_path / "cache"
    env = ansible_env(
        emulator,
        ANSIBLE_INVENTORY_CACHE="True",
        ANSIBLE_INVENTORY_CACHE_PLUGIN="ansible.builtin.jsonfile",
        ANSIBLE_INVENTORY_CACHE_CONNECTION=str(cache),
    )
    for inventory in INVENTORIES:
        for verbosity in ([], ["-vvv"]):
            command = [str(BIN / "ansible-inventory"), "-i", str(inventory), "--list", *verbosity]
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stderr
            assert pod["id"] in done.stdout and "HF_TOKEN" in done.stdout, done.stdout[-2000:]
            assert leaks(done.stdout + done.stderr, hunted) == [], inventory
    assert any(cache.iterdir()), "the inventory cache was not written"
    assert files_holding(cache, hunted) == []
