"""Harness for the trainer tests: run the real trainer (and torchrun) as processes, read what they wrote."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAINING = ROOT / "training"

# The contract's value (docs/checkpoints.md), written here independently of run_layout on purpose.
EXIT_INTERRUPTED = 75
# Every wait in these tests is bounded by this (a trainer run here takes seconds).
PROCESS_TIMEOUT = 120.0


def interruption_seed() -> int:
    """Random interruption points, reproducible with TRAINOPS_TEST_SEED=<seed printed on failure>."""
    return int(os.environ.get("TRAINOPS_TEST_SEED", str(random.SystemRandom().randrange(1 << 30))))


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TRAINING)
    env["OMP_NUM_THREADS"] = "1"
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


def write_config(directory: pathlib.Path, **overrides: Any) -> pathlib.Path:
    config: dict[str, Any] = {"run_id": "test", "steps": 200, "checkpoint": {"every_steps": 20, "keep_last": 3}}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps(config, sort_keys=True))
    return path


def trainer_command(config: pathlib.Path, run_dir: pathlib.Path, nproc: int = 1, extra: tuple[str, ...] = ()):
    args = ["-m", "trainops_train.train", "--config", str(config), "--run-dir", str(run_dir), *extra]
    if nproc == 1:
        return [sys.executable, *args]
    torchrun = str(pathlib.Path(sys.executable).with_name("torchrun"))
    return [torchrun, "--standalone", "--nproc_per_node", str(nproc), *args]


def start_trainer(config, run_dir, nproc=1, extra=(), preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    log = open(run_dir / "process.log", "ab")  # noqa: SIM115 - handed to the child, closed with it
    try:
        # own session: a kill of the whole group reaches torchrun and every worker
        return subprocess.Popen(
            trainer_command(config, run_dir, nproc, extra),
            env=trainer_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
    finally:
        log.close()


def run_trainer(config, run_dir, nproc=1, extra=()) -> int:
    process = start_trainer(config, run_dir, nproc, extra)
    try:
        return process.wait(timeout=PROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_group(process)
        raise


def run_trainer_captured(config, run_dir, extra=(), env=None) -> subprocess.CompletedProcess:
    """Run one process to its end with stdout and stderr captured (for the CLI's messages)."""
    return subprocess.run(
        trainer_command(config, run_dir, 1, extra),
        env=env or trainer_env(),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        check=False,
    )


def session_pids(process: subprocess.Popen) -> list[int]:
    """Every live process in the session the trainer was started in (torchrun starts its workers in
    sessions of their own, so they are found through their parent)."""
    found = {process.pid}
    changed = True
    while changed:
        changed = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in found:
                continue
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent in found:
                found.add(int(entry))
                changed = True
    return sorted(found)


def kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Deliver `sig` to the trainer and all its descendants at once (a pod dying, for SIGKILL)."""
    for pid in session_pids(process):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    try:
        process.wait(timeout=PROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        for pid in session_pids(process):
            os.kill(pid, signal.SIGKILL)
        process.wait(timeout=30)


def wait_for(predicate: Callable[[], Any], timeout: float = PROCESS_TIMEOUT, interval: float = 0.002) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"condition not met within {timeout} s")


def read_jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
    records = []
    if not path.exists():
        return records
    for line in path.read_text().splitlines(keepends=True):
        if line.endswith("\n"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def last_step(run_dir: pathlib.Path) -> int:
    """Last step in the metrics journal, read cheaply from the file's tail."""
    path = run_dir / "logs" / "metrics.jsonl"
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - 4096))
            lines = [line for line in handle.read().split(b"\n")[:-1] if line]
        return json.loads(lines[-1])["step"] if lines else 0
    except (OSError, ValueError, IndexError, KeyError):
        return 0


def journal(run_dir: pathlib.Path) -> list[tuple[int, str, str]]:
    """(step, loss as float.hex, lr as float.hex) for every journal line: what bitwise equality compares."""
    return [(r["step"], r["loss_hex"], r["lr_hex"]) for r in read_jsonl(run_dir / "logs" / "metrics.jsonl")]


def result(run_dir: pathlib.Path) -> dict[str, Any]:
    return json.loads((run_dir / "logs" / "result.json").read_text())


def events(run_dir: pathlib.Path) -> list[dict[str, Any]]:
    return read_jsonl(run_dir / "logs" / "events.jsonl")


def process_log(run_dir: pathlib.Path) -> str:
    path = run_dir / "process.log"
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def assert_sha256sum_accepts(checkpoint: pathlib.Path) -> None:
    completed = subprocess.run(
        ["sha256sum", "--check", "--strict", "SHA256SUMS"],
        cwd=checkpoint,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def ansible_env() -> dict[str, str]:
    """The environment of an ansible-playbook child that uses this checkout as trainops.gpu."""
    env = dict(os.environ)
    env["ANSIBLE_COLLECTIONS_PATH"] = str(ROOT / "collections")
    env["ANSIBLE_HOST_KEY_CHECKING"] = "False"
    env["ANSIBLE_LOCALHOST_WARNING"] = "False"
    env["ANSIBLE_INVENTORY_UNPARSED_WARNING"] = "False"
    env["ANSIBLE_NOCOLOR"] = "1"
    return env


def run_local_playbook(directory: pathlib.Path, name: str, text: str, variables: dict[str, Any]) -> Any:
    """Write the playbook `text` and its variables to `directory`, run it on localhost with this checkout's
    collection, assert it succeeded, and return the JSON it wrote to the variable `out` (directory/out.json)."""
    variables = {"out": str(directory / "out.json"), **variables}
    (directory / "vars.json").write_text(json.dumps(variables))
    (directory / f"{name}.yml").write_text(text)
    playbook = str(pathlib.Path(sys.executable).with_name("ansible-playbook"))
    done = subprocess.run(
        [playbook, "-i", "localhost,", "-c", "local", str(directory / f"{name}.yml"), "-e", f"@{directory}/vars.json"],
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return json.loads((directory / "out.json").read_text())
