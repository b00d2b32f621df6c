"""Self-check: can this machine run pods the way the emulator, the tests and the drill do?

    python -m runpod_emulator.doctor [--image IMAGE] [--require-image]

`make setup` ends with it (`make doctor` runs it alone). Two parts:

- host: every program the project runs outside a pod is present (podman and what a
  `--no-install-recommends` podman leaves out: conmon, runc, catatonit for `--init`, slirp4netns for
  ports on 127.0.0.1; ssh, rsync, debootstrap), and podman answers with the project's containers.conf;
- pod: a container of the local pod image, started with the emulator's own `podman run` arguments
  (`backends.podman.run_command`, the one definition), publishes 22 on 127.0.0.1 only, accepts an SSH login
  with a freshly generated key, and has rsync, tmux and python3.

Each failure names the missing piece and how to get it. Before the image exists the pod part is skipped,
saying so (`--require-image` makes that a failure). Tests that need pods call `ensure_pods_can_run()`,
which runs both parts once per process and raises `DoctorFailure` with the same message.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path

from .backends.base import BackendError
from .backends.podman import default_image, run_command
from .testing import ssh_run, wait_for_login

REPO_ROOT = Path(__file__).resolve().parents[2]
PROJECT_CONTAINERS_CONF = REPO_ROOT / "config" / "containers.conf"
DEFAULT_INIT_PATH = "/usr/libexec/podman/catatonit"
# Where podman 4 looks for conmon besides $PATH (containers.conf's conmon_path default).
CONMON_DIRS = ("/usr/libexec/podman", "/usr/local/libexec/podman", "/usr/local/lib/podman", "/usr/lib/podman")
DOCTOR_LABEL = "trainops.doctor"
SSH_WAIT_S = 30.0
FIX = "run `make setup`, which installs it"


@dataclass(frozen=True)
class Tool:
    program: str
    package: str
    purpose: str


HOST_TOOLS = (
    Tool("podman", "podman", "runs the pod containers"),
    Tool("runc", "runc", "the OCI runtime config/containers.conf selects"),
    Tool("slirp4netns", "slirp4netns", "publishes pod ports on 127.0.0.1 (netns = slirp4netns)"),
    Tool("ssh", "openssh-client", "reaches the pods"),
    Tool("ssh-keygen", "openssh-client", "makes throwaway pod keys"),
    Tool("rsync", "rsync", "syncs sources and pulls evidence"),
    Tool("debootstrap", "debootstrap", "builds the pod image"),
)
POD_TOOLS = ("rsync", "tmux", "python3")
# podman's error text -> the piece it means (checked in order; the first match names the piece).
PODMAN_ERRORS = (
    (re.compile(r"container-init binary not found|catatonit", re.I), "catatonit", "podman's --init"),
    (re.compile(r"conmon", re.I), "conmon", "podman's container monitor"),
    (re.compile(r"slirp4netns", re.I), "slirp4netns", "ports published on 127.0.0.1"),
    (re.compile(r"newuidmap|newgidmap", re.I), "uidmap", "user namespaces"),
    (re.compile(r"fuse-overlayfs", re.I), "fuse-overlayfs", "the storage driver"),
    (re.compile(r"\brunc\b|OCI runtime .*not found", re.I), "runc", "the OCI runtime"),
)


class DoctorFailure(RuntimeError):
    """A piece the project needs is missing or broken; the message names it and the fix."""

    def __init__(self, piece: str, detail: str, fix: str = FIX) -> None:
        super().__init__(f"doctor: {piece}: {detail}; {fix}")
        self.piece = piece


def containers_conf() -> Path:
    """The containers.conf podman reads: $CONTAINERS_CONF, set to the project's file when unset."""
    os.environ.setdefault("CONTAINERS_CONF", str(PROJECT_CONTAINERS_CONF))
    path = Path(os.environ["CONTAINERS_CONF"])
    if not path.is_file():
        raise DoctorFailure("containers.conf", f"CONTAINERS_CONF names {path}, which does not exist",
                            f"point it to {PROJECT_CONTAINERS_CONF}")  # fmt: skip
    return path


def init_path(conf: Path) -> str:
    """The init binary `podman run --init` executes: containers.conf's init_path, else podman's default."""
    try:
        data = tomllib.loads(conf.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DoctorFailure("containers.conf", f"{conf} cannot be read: {exc}", "fix the file") from None
    return str(data.get("containers", {}).get("init_path") or DEFAULT_INIT_PATH)


def _find_conmon() -> str | None:
    found = shutil.which("conmon")
    if found:
        return found
    return next((f"{d}/conmon" for d in CONMON_DIRS if os.access(f"{d}/conmon", os.X_OK)), None)


def check_host() -> list[str]:
    """Every host program and file the project runs; raises DoctorFailure naming the first missing one."""
    conf = containers_conf()
    lines = [f"containers.conf {conf}"]
    for tool in HOST_TOOLS:
        path = shutil.which(tool.program)
        if path is None:
            raise DoctorFailure(tool.package, f"`{tool.program}` is not on PATH ({tool.purpose})",
                                f"run `make setup`, which installs the apt package {tool.package}")  # fmt: skip
        lines.append(f"{tool.program} {path}")
    conmon = _find_conmon()
    if conmon is None:
        raise DoctorFailure("conmon", f"no conmon on PATH nor in {', '.join(CONMON_DIRS)} (podman's monitor)")
    lines.append(f"conmon {conmon}")
    init = init_path(conf)
    if not os.access(init, os.X_OK):
        raise DoctorFailure("catatonit", f"the container init {init} is missing (podman's --init runs it)",
                            "run `make setup`, which installs the apt package catatonit")  # fmt: skip
    lines.append(f"catatonit {init}")
    info = _podman(["info", "--format", "json"], timeout_s=60)
    if info.returncode != 0:
        raise classify(info.stderr, "podman info")
    host = json.loads(info.stdout).get("host", {})
    runtime = (host.get("ociRuntime") or {}).get("name", "?")
    if runtime != "runc":
        raise DoctorFailure("runc", f"podman uses the runtime {runtime!r}, not runc from {conf}",
                            f"export CONTAINERS_CONF={PROJECT_CONTAINERS_CONF}")  # fmt: skip
    lines.append(f"podman info: runtime {runtime}, storage {json.loads(info.stdout)['store']['graphDriverName']}")
    return lines


def classify(stderr: str, what: str) -> DoctorFailure:
    """A podman failure as the piece it names (catatonit, conmon, ...), else podman's own words."""
    text = stderr.strip()
    for pattern, package, purpose in PODMAN_ERRORS:
        if pattern.search(text):
            return DoctorFailure(package, f"{what} failed ({purpose}): {text[-300:]}",
                                 f"run `make setup`, which installs the apt package {package}")  # fmt: skip
    return DoctorFailure("podman", f"{what} failed: {text[-500:]}", "see podman's message above")


def _podman(args: list[str], timeout_s: float = 120, env: dict[str, str] | None = None):
    try:
        return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout_s, env=env,
                              check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise DoctorFailure("podman", f"`podman {args[0]}` did not answer within {timeout_s:.0f} s",
                            "check `podman ps` and the podman storage") from None  # fmt: skip


def image_exists(image: str) -> bool:
    return _podman(["image", "exists", image], timeout_s=60).returncode == 0


def _ssh_port(name: str) -> int:
    out = _podman(["port", name, "22/tcp"], timeout_s=30)
    bindings = out.stdout.strip().splitlines()
    if out.returncode != 0 or not bindings:
        raise DoctorFailure("podman", f"22/tcp of {name} is not published: {out.stderr.strip()}", "see above")
    host, _sep, port = bindings[0].rpartition(":")
    if host != "127.0.0.1":
        raise DoctorFailure("slirp4netns", f"22/tcp is published on {host}, not 127.0.0.1",
                            f"export CONTAINERS_CONF={PROJECT_CONTAINERS_CONF} (netns = slirp4netns)")  # fmt: skip
    return int(port)


def check_pod(image: str, pod_tools: tuple[str, ...] = POD_TOOLS) -> list[str]:
    """Start a container of `image` exactly as the emulator does, log in over SSH, look for pod_tools."""
    name = f"trainops-doctor-{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory(prefix="trainops-doctor-") as tmp:
        key = Path(tmp) / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "trainops-doctor", "-f", str(key)],
                       check=True, timeout=30)  # fmt: skip
        args, env = run_command(image, name, env={"PUBLIC_KEY": key.with_suffix(".pub").read_text().strip()},
                                labels={DOCTOR_LABEL: "1"})  # fmt: skip
        started = time.monotonic()
        try:
            run = _podman(args, env=env)
            if run.returncode != 0:
                raise classify(run.stderr, f"podman run of {image}")
            port = _ssh_port(name)
            try:
                wait_for_login(key, port, SSH_WAIT_S)
            except TimeoutError as exc:
                raise DoctorFailure("ssh login", f"a fresh key: {exc}", "rebuild the image with `make image`") from None
            login_s = time.monotonic() - started
            probe = " ".join(f"command -v {t} >/dev/null || echo {t};" for t in pod_tools)
            missing = ssh_run(key, port, probe, timeout_s=30).stdout.split()
            if missing:
                raise DoctorFailure(", ".join(missing), f"missing in the pod image {image}",
                                    "add it to emulator/image/packages.txt and run `make image`")  # fmt: skip
        finally:
            _podman(["rm", "-f", "-t", "0", name], timeout_s=60)
    return [f"pod: {image} started with the emulator's arguments, 22/tcp on 127.0.0.1:{port}",
            f"pod: ssh login with a fresh key after {login_s:.1f} s; {', '.join(pod_tools)} present"]  # fmt: skip


_passed: set[str] = set()


def ensure_pods_can_run(image: str | None = None) -> str:
    """For tests: both checks, once per process and image; returns the image, raises DoctorFailure."""
    image = image or default_image()
    if image not in _passed:
        check_host()
        if not image_exists(image):
            raise DoctorFailure("pod image", f"{image} is not built", "run `make image`")
        check_pod(image)
        _passed.add(image)
    return image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runpod_emulator.doctor", description=__doc__.partition("\n")[0])
    parser.add_argument("--image", help="pod image (default: localhost/trainops-pod:<emulator/image/tag.sh>)")
    parser.add_argument("--require-image", action="store_true", help="fail instead of skipping without the image")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        lines = check_host()
        image = args.image or default_image()
        if image_exists(image):
            lines += check_pod(image)
        elif args.require_image:
            raise DoctorFailure("pod image", f"{image} is not built", "run `make image`")
        else:
            lines.append(f"pod: skipped, {image} is not built yet (`make image` builds it)")
    except (DoctorFailure, BackendError) as exc:
        message = str(exc) if isinstance(exc, DoctorFailure) else f"doctor: pod image: {exc}"
        print(f"doctor: FAILED\n{message}", file=sys.stderr)
        return 1
    for line in lines:
        print(f"doctor: ok {line}")
    print(f"doctor: all checks passed in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
