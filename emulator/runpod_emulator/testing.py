"""Start an emulator as a subprocess from tests: `EmulatorProcess`.

Usage (pytest)::

    from runpod_emulator.testing import EmulatorProcess

    @pytest.fixture
    def emulator(tmp_path):
        with EmulatorProcess(backend="memory", state_dir=tmp_path / "emu") as emu:
            yield emu

    def test_something(emulator):
        api = emulator.url + "/v2"                       # http://127.0.0.1:PORT/v2
        headers = {"Authorization": f"Bearer {emulator.api_key}"}
        emulator.admin("POST", "/_emulator/faults", {"kind": "429", "count": 1})
        ...
        recorded = emulator.admin("GET", "/_emulator/requests")["requests"]

`EmulatorProcess(backend="memory"|"podman", api_key=None, state_dir=None, extra_args=(), startup_timeout_s=30)`:

- `start()` runs `python -m runpod_emulator serve --host 127.0.0.1 --port 0 ...` (the port the server picked
  is read from <state_dir>/emulator.json) and waits, bounded, until it answers; `stop()` ends it with
  SIGTERM (SIGKILL after 10 s); `restart()` is stop + start on the same state dir (a new port, unless
  `port=` was given). Used as a context manager it starts and, on exit, resets the emulator (removing
  every container it made) and stops it; pass `reset_on_exit=False` to keep the state.
- `.url` (no /v2), `.api_url` (= url + "/v2"), `.api_key` (generated when not given), `.state_dir`
  (a fresh temporary directory when not given), `.pid`.
- `.api(method, path, body=None, headers=None)` -> (status, headers, parsed JSON or None): a raw call to
  any path, e.g. `emu.api("GET", "/v2/pods")`.
- `.admin(method, path, body=None)` -> parsed JSON (None for 204); raises RuntimeError on any status >= 400.
- `.wait_for(pod_id, predicate, timeout_s)`: polls GET /v2/pods/{id} until predicate(pod) is true.
- The key reaches the server through its environment (RUNPOD_EMULATOR_API_KEY), never its command line.

`ssh_run(key, port, command, timeout_s=30)` runs a command in a pod over real SSH (root@127.0.0.1:port),
non-interactively and without pinning host keys (pods get new ones and new ports on every start);
`wait_for_login(key, port, timeout_s=60)` waits, bounded, until a login succeeds.

`ansible_env(url, api_key, **extra)` is the environment for ansible-playbook (or ansible-inventory) of this checkout
against an emulator: the checkout's collections and ansible.cfg, the emulator's URL and key, no colour and no
localhost or unparsed-inventory warnings, plus `extra`. `run_emulator_playbook(url, api_key, playbook, extra_vars,
timeout_s, **extra_env)` runs `playbooks/<playbook>` with the local emulator inventory
(inventories/local.runpod.yml) and the extra vars as JSON, from the checkout's root, and returns the finished
process with its output (bounded by `timeout_s`; a failing play is returned, not raised).

`default_signals()` is the `preexec_fn` for a child that a test interrupts with SIGINT or SIGTERM and expects
to react as a child of an interactive shell does. A test run started in the background (`cmd &` in a script,
many CI runners, cron) inherits SIGINT ignored; a child inherits that too (subprocess's `restore_signals`
leaves SIGINT alone) and Python then installs no KeyboardInterrupt handler. It sets `SIGNALS_TESTS_SEND` to
SIG_DFL in the child, whatever pytest inherited.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACKAGE_PARENT = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_PARENT.parent

BIN = Path(sys.executable).parent
LOCAL_INVENTORY = REPO_ROOT / "inventories" / "local.runpod.yml"

# The signals tests send to their children and expect them to react to (SIGKILL cannot be ignored).
SIGNALS_TESTS_SEND = (signal.SIGINT, signal.SIGTERM)


def default_signals() -> None:
    """`preexec_fn` for a child that a test signals: SIGNALS_TESTS_SEND at SIG_DFL (see the module docstring)."""
    for signum in SIGNALS_TESTS_SEND:
        signal.signal(signum, signal.SIG_DFL)


def ctrl_c(process: subprocess.Popen, tries: int = 5, grace_s: float = 10.0) -> None:
    """SIGINT to `process`'s process group, as a terminal's Ctrl-C sends it, again (as a user presses it again)
    while the process still runs after grace_s, at most `tries` times. ansible-playbook can lose one: its
    SIGINT handler raises KeyboardInterrupt, and when that lands in the at-fork hook logging runs while a worker
    is forked, Python reports it as "Exception ignored" and the play goes on."""
    for _attempt in range(tries):
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def kill_sshd(container: str) -> None:
    """Every sshd in a podman backend pod's container (the listener and the sessions Ansible's connection keeps):
    the pod runs on, its SSH is gone."""
    subprocess.run(["podman", "exec", container, "pkill", "-KILL", "-x", "sshd"], check=True, timeout=60)


SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
               "-o", "BatchMode=yes", "-o", "ConnectTimeout=10")  # fmt: skip


def ssh_run(key: Path, port: int, command: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    """Run `command` in a pod over real SSH (root@127.0.0.1:port)."""
    return subprocess.run(
        ["ssh", "-i", str(key), *SSH_OPTIONS, "-p", str(port), "root@127.0.0.1", command],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def wait_for_login(key: Path, port: int, timeout_s: float = 60, poll_s: float = 0.3) -> None:
    """Wait, bounded, until `ssh true` succeeds on a pod; TimeoutError with ssh's last words otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = ssh_run(key, port, "true", timeout_s=15)
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"root@127.0.0.1:{port} refused the key for {timeout_s:.0f} s: {result.stderr.strip()[-300:]}"
            )
        time.sleep(poll_s)


def ansible_env(url: str, api_key: str, **extra: str) -> dict[str, str]:
    """The environment for Ansible of this checkout against the emulator at `url`; see the module docstring."""
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"),
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        RUNPOD_API_URL=url,
        RUNPOD_API_KEY=api_key,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
    )
    env.update(extra)
    return env


def run_emulator_playbook(
    url: str, api_key: str, playbook: str, extra_vars: dict[str, Any], timeout_s: float, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook playbooks/<playbook> with the local emulator inventory; see the module docstring."""
    command = [
        str(BIN / "ansible-playbook"),
        "-i",
        str(LOCAL_INVENTORY),
        str(REPO_ROOT / "playbooks" / playbook),
        "-e",
        json.dumps(extra_vars),
    ]
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=ansible_env(url, api_key, **extra_env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


class EmulatorProcess:
    """A `runpod_emulator serve` subprocess on 127.0.0.1; see the module docstring."""

    def __init__(
        self,
        backend: str = "memory",
        api_key: str | None = None,
        state_dir: str | Path | None = None,
        extra_args: list[str] | tuple[str, ...] = (),
        port: int = 0,
        startup_timeout_s: float = 30.0,
        reset_on_exit: bool = True,
        python: str | None = None,
    ) -> None:
        if backend not in ("memory", "podman"):
            raise ValueError(f"backend must be 'memory' or 'podman', not {backend!r}")
        self.backend = backend
        self.api_key = api_key or "emu-" + secrets.token_hex(16)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="runpod-emulator-")
            state_dir = self._tmp.name
        self.state_dir = Path(state_dir).resolve()
        self.extra_args = list(extra_args)
        self.requested_port = port
        self.startup_timeout_s = startup_timeout_s
        self.reset_on_exit = reset_on_exit
        self.python = python or sys.executable
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.log_path = self.state_dir / "emulator.out"

    # Process control -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("emulator is not running")
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return self.url + "/v2"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> EmulatorProcess:
        if self.process is not None:
            raise RuntimeError("emulator already started")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_PARENT), env.get("PYTHONPATH", "")]))
        env["RUNPOD_EMULATOR_API_KEY"] = self.api_key
        env.setdefault("CONTAINERS_CONF", str(REPO_ROOT / "config" / "containers.conf"))
        command = [
            self.python,
            "-m",
            "runpod_emulator",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.requested_port),
            "--state-dir",
            str(self.state_dir),
            "--backend",
            self.backend,
            *self.extra_args,
        ]
        info_path = self.state_dir / "emulator.json"
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.log_path.read_text(errors="replace")[-2000:]
                self.process = None
                raise RuntimeError(f"emulator exited during startup:\n{output}")
            info = _read_info(info_path)
            if info and info.get("pid") == self.process.pid:
                self.port = int(info["port"])
                try:
                    self.admin("GET", "/_emulator/info")
                    return self
                except (OSError, RuntimeError):
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"emulator did not answer within {self.startup_timeout_s} s (log: {self.log_path})")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None
        self.port = None

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing is flushed or cleaned up."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None
            self.port = None

    def restart(self) -> EmulatorProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.reset_on_exit and self.process is not None and self.process.poll() is None:
                with contextlib.suppress(OSError, RuntimeError):
                    self.admin("POST", "/_emulator/reset", timeout_s=180)
        finally:
            self.stop()
            if self.backend == "podman" and self.reset_on_exit:
                remove_containers_of(self.state_dir)
            if self._tmp is not None:
                self._tmp.cleanup()

    # HTTP ----------------------------------------------------------------------------------------------

    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> tuple[int, dict[str, str], Any]:
        """One request with the Bearer key: (status, response headers, JSON body or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.api_key}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                status, response_headers, raw = response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            status, response_headers, raw = error.code, dict(error.headers), error.read()
        return status, response_headers, json.loads(raw) if raw else None

    def admin(self, method: str, path: str, body: Any = None, timeout_s: float = 120.0) -> Any:
        status, _headers, payload = self.api(method, path, body, timeout_s=timeout_s)
        if status >= 400:
            raise RuntimeError(f"{method} {path} answered {status}: {payload}")
        return payload

    def wait_for(self, pod_id: str, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout_s
        pod: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status, _headers, pod = self.api("GET", f"/v2/pods/{pod_id}")
            if status == 200 and predicate(pod):
                return pod
            time.sleep(0.1)
        raise TimeoutError(f"pod {pod_id} did not reach the awaited state within {timeout_s} s; last: {pod}")


def _read_info(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def remove_containers_of(state_dir: Path) -> None:
    """Remove podman containers labelled with this state dir (only ever ours), bounded."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(REPO_ROOT / "config" / "containers.conf"))
    label = f"label=trainops.emulator.state={Path(state_dir).resolve()}"
    try:
        listed = subprocess.run(
            ["podman", "ps", "-aq", "--filter", label], capture_output=True, text=True, env=env, timeout=60, check=False
        )
        ids = listed.stdout.split()
        if ids:
            subprocess.run(
                ["podman", "rm", "-f", "-t", "0", *ids], capture_output=True, env=env, timeout=120, check=False
            )
    except (OSError, subprocess.TimeoutExpired):
        return
