"""Benchmark of the sync role's push against plain rsync over the same SSH endpoint (not a test).

A 200 MB tree (many small files, a few large ones) in a temporary git repository is pushed to one pod of
the podman-backed emulator:

- the role (`ansible-playbook`, `trainops.gpu.sync` with `tasks_from: push`): a first run into an empty
  run directory, then a second run of the unchanged tree (provenance, rsync quick check, `sha256sum -c` of
  the whole tree on the pod, Ansible's own start-up and per-task round trips);
- `rsync -a` of the same tree (without `.git/`) to another directory of the same pod, first and second run.

Each repetition uses a fresh run id and a fresh rsync destination; the figures are medians. The ratios
printed are role / raw rsync for the first and the unchanged second run, for the whole playbook and for the
role's rsync task alone (its command's own time, from the JSON callback). `make bench-sync`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runpod_emulator.testing import SSH_OPTIONS, EmulatorProcess, wait_for_login

ROOT = Path(__file__).resolve().parents[1]
GPU = "NVIDIA H100 80GB HBM3"
MIB = 1024 * 1024


def make_tree(src: Path, total_mb: int, seed: int = 11) -> tuple[int, int]:
    """A git repository of ~total_mb: 85 % in 6 large files, the rest in small files of 1-16 KiB."""
    rng = random.Random(seed)
    src.mkdir(parents=True)
    large_total = total_mb * MIB * 85 // 100
    files = 0
    written = 0
    for index in range(6):
        path = src / "data" / f"shard-{index}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        size = large_total // 6
        path.write_bytes(os.urandom(size))
        files += 1
        written += size
    small_total = total_mb * MIB - written
    index = 0
    while small_total > 0:
        size = min(small_total, rng.randint(1024, 16 * 1024))
        path = src / "pkg" / f"mod{index // 100:03d}" / f"file{index:05d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(size))
        small_total -= size
        written += size
        files += 1
        index += 1
    (src / ".gitignore").write_text("*.log\n")
    files += 1
    (src / "ignored.log").write_text("not pushed\n")
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "-c", "core.looseCompression=0"]
    subprocess.run([*git, "init", "-q"], cwd=src, check=True)
    subprocess.run([*git, "add", "-A"], cwd=src, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench tree"], cwd=src, check=True)
    return files, written


def start_pod(emu: EmulatorProcess, key: Path) -> int:
    emu.admin("PUT", "/v2/account/ssh-keys", {"keys": [key.with_suffix(".pub").read_text().strip()]})
    body = {"name": "trainops-bench-sync", "image": "i", "gpu": {"id": GPU}, "ports": ["22/tcp"], "startSsh": True}
    pod = emu.admin("POST", "/v2/pods", body)
    ready = emu.wait_for(pod["id"], lambda p: p["ssh"]["direct"] is not None, 180)
    port = ready["ssh"]["direct"]["port"]
    wait_for_login(key, port, 120)
    return port


def run_role(workdir: Path, src: Path, run_id: str) -> tuple[float, float, dict]:
    """One ansible-playbook run of the role's push: (wall seconds, rsync task seconds, sync_push_result)."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(ROOT / "collections"))
    started = time.perf_counter()
    result = subprocess.run(
        ["ansible-playbook", "-i", str(workdir / "inventory.yml"), str(workdir / "push.yml"),
         "-e", json.dumps({"bench_src": str(src), "bench_runs": str(workdir / "runs"), "bench_run_id": run_id})],
        capture_output=True, text=True, env=env, check=False, cwd=ROOT,
    )  # fmt: skip
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"sync_bench: the role failed:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout[result.stdout.index("{") :])
    rsync_s = 0.0
    push_result: dict = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            for host_result in task["hosts"].values():
                cmd = host_result.get("cmd") or []
                if cmd[:1] == ["rsync"]:
                    hours, minutes, seconds = host_result["delta"].split(":")
                    rsync_s = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
                facts = host_result.get("ansible_facts") or {}
                push_result = facts.get("sync_push_result", push_result)
    return wall, rsync_s, push_result


def run_rsync(key: Path, port: int, src: Path, dest: str) -> float:
    rsh = " ".join(["ssh", "-p", str(port), "-i", str(key), *SSH_OPTIONS])
    started = time.perf_counter()
    argv = ["rsync", "-a", "--exclude=/.git/", "--exclude=*.log", f"--rsh={rsh}", f"{src}/", f"root@127.0.0.1:{dest}/"]
    subprocess.run(argv, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sync-bench-", dir="/var/tmp") as tmp:
        workdir = Path(tmp)
        key = workdir / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
        src = workdir / "src"
        started = time.perf_counter()
        files, size = make_tree(src, args.size_mb)
        print(
            f"tree: {files} files, {size / MIB:.0f} MiB, git repository made in {time.perf_counter() - started:.1f} s"
        )

        with EmulatorProcess(backend="podman", state_dir=workdir / "emu") as emu:
            port = start_pod(emu, key)
            (workdir / "inventory.yml").write_text(json.dumps({"all": {"hosts": {"pod": {
                "ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "root",
                "ansible_ssh_private_key_file": str(key), "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_ssh_common_args": " ".join(SSH_OPTIONS[:-2]),
            }}}}))  # fmt: skip
            (workdir / "push.yml").write_text(json.dumps([{
                "name": "Bench push", "hosts": "pod", "gather_facts": False,
                "tasks": [{"name": "Push",
                           "ansible.builtin.include_role": {"name": "trainops.gpu.sync", "tasks_from": "push"},
                           "vars": {"sync_run_id": "{{ bench_run_id }}", "sync_src": "{{ bench_src }}",
                                    "sync_runs_dir": "{{ bench_runs }}"}}],
            }]))  # fmt: skip
            rows: dict[str, list[float]] = {
                k: [] for k in ("role1", "role2", "rsync1_task", "rsync2_task", "raw1", "raw2")
            }
            for rep in range(args.repeat):
                wall, task, first = run_role(workdir, src, f"bench{rep}")
                rows["role1"].append(wall)
                rows["rsync1_task"].append(task)
                wall, task, second = run_role(workdir, src, f"bench{rep}")
                rows["role2"].append(wall)
                rows["rsync2_task"].append(task)
                if second.get("bytes_transferred") != 0 or second.get("files_transferred") != 0:
                    sys.exit(f"sync_bench: the second push transferred content: {second}")
                rows["raw1"].append(run_rsync(key, port, src, f"/workspace/raw{rep}"))
                rows["raw2"].append(run_rsync(key, port, src, f"/workspace/raw{rep}"))
                pushed = f"{first.get('files_transferred')} files, {first.get('bytes_transferred', 0) / MIB:.0f} MiB"
                timings = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in rows.items())
                print(f"rep {rep}: {timings}; first push sent {pushed}")

    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nmedians of {args.repeat} ({size / MIB:.0f} MiB, {files} files):")
    for run, n in (("first run ", "1"), ("second run", "2")):
        print(
            f"  {run}: role {med['role' + n]:6.2f} s (its rsync task {med['rsync' + n + '_task']:.2f} s)"
            f"   raw rsync -a {med['raw' + n]:6.2f} s   ratio role/raw {med['role' + n] / med['raw' + n]:5.2f}x"
            f" playbook, {med['rsync' + n + '_task'] / med['raw' + n]:5.2f}x rsync task"
        )
    print("  target: the unchanged second run within 1.2x of raw rsync's")


if __name__ == "__main__":
    main()
