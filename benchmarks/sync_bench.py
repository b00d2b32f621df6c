"""Benchmark of the sync role's push against plain rsync over the same SSH endpoint (not a test).

A 200 MB tree (many small files, a few large ones) in a temporary git repository is pushed to one pod of
the podman-backed emulator, in each repetition, one after the other:

- the role (`ansible-playbook`, `trainops.gpu.sync` with `tasks_from: push`): a first run into an empty
  run directory, then a second run of the unchanged tree. The push itself is one `trainops.gpu.sync_push`
  task: provenance (git, the hash cache), one SSH connection, rsync's quick check, and the pod's check of
  every file against the manifest; its own time (`timings.total_s`, measured inside the task) is reported
  beside the whole playbook's;
- `rsync -a` of the same tree (without `.git/`) to another directory of the same pod, first and second run;
- an empty play against the same inventory: what any `ansible-playbook` run costs before its first task.

Each repetition uses a fresh run id and a fresh rsync destination. Printed: medians with their range, and the
ratios of the push task and of the playbook to raw rsync (the baseline, measured in the same run).
`make bench-sync`.
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

from runpod_emulator.testing import SSH_OPTIONS, EmulatorProcess, ansible_env, wait_for_login

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


def run_role(workdir: Path, env: dict[str, str], src: Path, run_id: str) -> tuple[float, dict]:
    """One ansible-playbook run of the role's push: (wall seconds, the sync_push task's result)."""
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
    for play in report["plays"]:
        for task in play["tasks"]:
            for host_result in task["hosts"].values():
                if "timings" in host_result and "manifest_sha256" in host_result:
                    return wall, host_result
    sys.exit("sync_bench: no sync_push result in the playbook's output")


def run_empty_play(workdir: Path, env: dict[str, str]) -> float:
    """ansible-playbook's own cost: the same inventory, one play with no task."""
    started = time.perf_counter()
    subprocess.run(
        ["ansible-playbook", "-i", str(workdir / "inventory.yml"), str(workdir / "empty.yml")],
        capture_output=True, text=True, env=env, check=True, cwd=ROOT,
    )  # fmt: skip
    return time.perf_counter() - started


def run_rsync(key: Path, port: int, src: Path, dest: str) -> float:
    rsh = " ".join(["ssh", "-p", str(port), "-i", str(key), *SSH_OPTIONS])
    started = time.perf_counter()
    argv = ["rsync", "-a", "--exclude=/.git/", "--exclude=*.log", f"--rsh={rsh}", f"{src}/", f"root@127.0.0.1:{dest}/"]
    subprocess.run(argv, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
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
            env = ansible_env(emu.url, emu.api_key, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
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
            empty = [{"name": "Empty", "hosts": "pod", "gather_facts": False, "tasks": []}]
            (workdir / "empty.yml").write_text(json.dumps(empty))
            rows: dict[str, list[float]] = {
                k: [] for k in ("role1", "role2", "push1", "push2", "raw1", "raw2", "empty")
            }
            phases: list[dict] = []
            for rep in range(args.repeat):
                wall, first = run_role(workdir, env, src, f"bench{rep}")
                rows["role1"].append(wall)
                rows["push1"].append(first["timings"]["total_s"])
                wall, second = run_role(workdir, env, src, f"bench{rep}")
                rows["role2"].append(wall)
                rows["push2"].append(second["timings"]["total_s"])
                phases.append(second["timings"])
                if second["bytes_transferred"] != 0 or second["files_transferred"] != 0 or second["changed"]:
                    sys.exit(f"sync_bench: the second push transferred content or changed something: {second}")
                if not second["verified"] or second["files_verified"] != first["files_verified"]:
                    sys.exit(f"sync_bench: the second push did not verify every file: {second}")
                rows["raw1"].append(run_rsync(key, port, src, f"/workspace/raw{rep}"))
                rows["raw2"].append(run_rsync(key, port, src, f"/workspace/raw{rep}"))
                rows["empty"].append(run_empty_play(workdir, env))
                pushed = f"{first['files_transferred']} files, {first['bytes_transferred'] / MIB:.0f} MiB"
                timings = ", ".join(f"{k} {v[-1]:.3f} s" for k, v in rows.items())
                print(f"rep {rep}: {timings}; first push sent {pushed}; second push {second['timings']}", flush=True)
            report(rows, phases, size, files, args.repeat)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.3f} s ({min(values):.3f}-{max(values):.3f})"


def report(rows: dict[str, list[float]], phases: list[dict], size: int, files: int, repeat: int) -> None:
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nmedians (min-max) of {repeat} repetitions ({size / MIB:.0f} MiB, {files} files):")
    print(f"  ansible-playbook with an empty play: {spread(rows['empty'])}")
    for run, n in (("first run ", "1"), ("second run", "2")):
        print(
            f"  {run}: sync_push task {spread(rows['push' + n])}   playbook {spread(rows['role' + n])}"
            f"   raw rsync -a {spread(rows['raw' + n])}"
        )
        print(
            f"              ratio to raw rsync: sync_push task {med['push' + n] / med['raw' + n]:.2f}x,"
            f" playbook {med['role' + n] / med['raw' + n]:.2f}x"
        )
    keys = ("provenance_s", "connect_wait_s", "rsync_s", "verify_s")
    print("  second run, inside the task (medians): " + ", ".join(
        f"{k} {statistics.median(p[k] for p in phases):.3f} s" for k in keys))  # fmt: skip
    print("  target: the unchanged second run within 1.2x of raw rsync's")


if __name__ == "__main__":
    main()
