"""trainops.gpu.provenance through a real ansible-playbook on localhost: recorded, unchanged on a second run,
check mode predicts without writing, and an env secret appears in no output and no file."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECRET = "hf_e2e-SecretValue-42424242"

PLAYBOOK = """
- name: Record provenance
  hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Record the run's provenance
      trainops.gpu.provenance:
        src: "{{ src }}"
        run_id: e2e-run
        runs_dir: "{{ playbook_dir }}/runs"
        command: [python, -m, trainops_train.train, --config, "{{ config }}"]
        config: "{{ config }}"
        config_is_trainer: true
        env:
          HF_TOKEN: "{{ secret }}"
          OMP_NUM_THREADS: "1"
        pod: {id: pod-1, gpu_type: NVIDIA H100 80GB HBM3, gpu_count: 1, data_center: EU-RO-1}
      register: prov
"""


def git(repo: pathlib.Path, *args: str) -> None:
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.invalid", "-c", "init.defaultBranch=main"]
    subprocess.run(["git", "-C", str(repo), *identity, *args], check=True, capture_output=True)


def play(tmp_path: pathlib.Path, *extra: str) -> tuple[dict, str]:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CONFIG", None)
    command = [str(pathlib.Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local"]
    variables = {"src": str(tmp_path / "src"), "config": str(tmp_path / "train.json"), "secret": SECRET}
    command += ["-v", "playbook.yml", "-e", json.dumps(variables), *extra]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert SECRET not in done.stdout + done.stderr
    report = json.loads(done.stdout[done.stdout.index("{") :])
    return report["plays"][0]["tasks"][0]["hosts"]["localhost"], done.stdout


def test_provenance_through_ansible_playbook(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    git(src, "init", "-q")
    (src / "train.py").write_text("print('train')\n")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "first")
    (src / "train.py").write_text("print('edited')\n")  # dirty: archived
    (tmp_path / "train.json").write_text(json.dumps({"steps": 20, "optim": {"lr": 0.5}}))
    (tmp_path / "playbook.yml").write_text(PLAYBOOK)
    run_dir = tmp_path / "runs" / "e2e-run"

    predicted, _out = play(tmp_path, "--check")
    assert predicted["changed"] is True and not run_dir.exists()

    first, _out = play(tmp_path)
    assert first["changed"] is True
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record == first["provenance"]
    assert record["source"]["dirty"] is True and record["source"]["branch"] == "main"
    assert record["env"] == {"HF_TOKEN": "<redacted>", "OMP_NUM_THREADS": "1"}
    assert record["config"]["trainer_config_hash"].startswith("sha256:")
    assert record["pod"]["gpu_count"] == 1
    archive_sha = hashlib.sha256((run_dir / "source.tar").read_bytes()).hexdigest()
    assert first["archive_sha256"] == archive_sha == predicted["archive_sha256"]
    assert first["invocation"]["module_args"]["env"]["HF_TOKEN"] == "<redacted>"
    for path in run_dir.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path

    second, _out = play(tmp_path)
    assert second["changed"] is False
    assert second["provenance"]["recorded_at"] == record["recorded_at"]
