"""The `podman` backend: each pod is a container of the local pod image, sshd published on 127.0.0.1.

Containers are named <prefix>-<pod id> and labelled with this emulator's state directory, the pod id
and the incarnation (`gen`), so an emulator finds its own containers after a restart and never touches
anyone else's. Env values reach podman through its environment (`-e NAME`), never its command line.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from .. import schema
from ..clock import parse_rfc3339
from .base import BackendError, ContainerState, LaunchSpec

IMAGE_REPOSITORY = "localhost/trainops-pod"
# Pod image names (the API's `image`) that run a variant of the local pod image instead of the default one,
# built by `emulator/image/variant.sh <variant>` as localhost/trainops-pod-<variant>:<tag> (docs/emulator.md).
IMAGE_VARIANTS = {
    # As RunPod's own images (runpod/pytorch): openssh-server but no rsync; rsync's .deb is in a local apt
    # repository (/opt/trainops-apt), the image's only apt source.
    "trainops/pod:no-rsync": "no-rsync",
}
LABEL_STATE = "trainops.emulator.state"
LABEL_POD = "trainops.emulator.pod"
LABEL_GEN = "trainops.emulator.gen"
# Names podman itself needs from its environment: values for these go on the command line instead.
_PODMAN_OWN_ENV = {"PATH", "HOME", "TMPDIR", "CONTAINERS_CONF", "LANG", "LC_ALL", "USER", "SHELL"}
_COMMAND_TIMEOUT_S = 120.0
# What podman can run, beyond RunPod's schema (docs/emulator.md, differences): env reaches podman through
# its environment (`-e NAME`), so names must be environment names and values encodable with no NUL; mount
# paths go into `-v host:path[:ro]`, so they must be absolute with no `:` `,` or NUL; an empty volumeId
# would name the directory of every volume.
_MOUNT_PATH = {"type": "string", "pattern": r"^/[^\x00:,]*$"}
POD_LIMITS = {
    "type": "object",
    "properties": {
        "env": {
            "type": "object",
            "propertyNames": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
            "additionalProperties": {"type": "string", "pattern": r"^[^\x00\ud800-\udfff]*$"},
        },
        "mounts": {
            "type": "object",
            "properties": {
                "persistent": {"type": "object", "properties": {"path": _MOUNT_PATH}},
                "network": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"volumeId": {"minLength": 1}, "path": _MOUNT_PATH}},
                },
            },
        },
    },
}


class PodmanBackend:
    name = "podman"
    instant = False

    def __init__(
        self,
        state_dir: Path,
        image: str,
        container_prefix: str = "rpemu",
        provision_s: float = 0.0,
        start_s: float = 0.0,
    ) -> None:
        self.state_dir = str(state_dir.resolve())
        self.image = image
        self.prefix = container_prefix
        self.provision_s = provision_s
        self.start_s = start_s
        found = shutil.which("podman")
        if found is None:
            raise BackendError("podman is not installed (the podman backend needs it)")
        self.podman = found
        self._variant_images: dict[str, str] = {}

    def container_name(self, pod_id: str) -> str:
        return f"{self.prefix}-{pod_id}"

    def _run(
        self, args: list[str], env: dict[str, str] | None = None, timeout_s: float = _COMMAND_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.podman, *args],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BackendError(f"podman {args[0]} did not finish within {timeout_s:.0f} s") from None

    def check_pod(self, body: dict) -> list[str]:
        """Violations of POD_LIMITS by a create or update body (already valid against RunPod's schema)."""
        return schema.validate(body, POD_LIMITS)

    def check_image(self) -> None:
        result = self._run(["image", "exists", self.image], timeout_s=60)
        if result.returncode != 0:
            raise BackendError(f"pod image {self.image} is missing: run `make image` first")

    def image_for(self, pod_image: str) -> str:
        """The local image a pod whose `image` is pod_image runs: its variant (IMAGE_VARIANTS), else self.image."""
        variant = IMAGE_VARIANTS.get(pod_image)
        if variant is None:
            return self.image
        if variant not in self._variant_images:
            self._variant_images[variant] = variant_image(variant)
        local = self._variant_images[variant]
        if self._run(["image", "exists", local], timeout_s=60).returncode != 0:
            raise BackendError(
                f"pod image {pod_image} is the local variant {local}, which is not built: "
                f"run emulator/image/variant.sh {variant}"
            )
        return local

    def launch(self, spec: LaunchSpec) -> None:
        name = self.container_name(spec.pod_id)
        labels = {LABEL_STATE: self.state_dir, LABEL_POD: spec.pod_id, LABEL_GEN: str(spec.gen)}
        args, env = run_command(
            self.image_for(spec.image),
            name,
            hostname=spec.pod_id,
            labels=labels,
            env=spec.env,
            publish_ssh=spec.publish_ssh,
            mounts=spec.mounts,
        )
        result = self._run(args, env=env)
        if result.returncode != 0 and "already in use" in result.stderr:
            # A container of an earlier incarnation that no record knew about (a crash mid-launch).
            self._run(["rm", "-f", "-t", "0", name])
            result = self._run(args, env=env)
        if result.returncode != 0:
            self._run(["rm", "-f", "-t", "0", name])
            raise BackendError(f"podman run of {name} failed: {result.stderr.strip()[-500:]}")

    def _inspect(self, pod_id: str) -> dict | None:
        result = self._run(["container", "inspect", self.container_name(pod_id)], timeout_s=30)
        if result.returncode != 0:
            return None
        try:
            data = json.loads(result.stdout)
        except json.JSONDecodeError:
            return None
        return data[0] if data else None

    def wait_running(self, pod_id: str, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        while True:
            info = self._inspect(pod_id)
            if info is None:
                raise BackendError(f"container {self.container_name(pod_id)} is gone")
            state = info.get("State", {})
            if state.get("Running"):
                return published_ssh_port(info)
            if state.get("Status") in ("exited", "stopped", "dead"):
                raise BackendError(f"container {self.container_name(pod_id)} exited with code {state.get('ExitCode')}")
            if time.monotonic() > deadline:
                raise BackendError(f"container {self.container_name(pod_id)} not running after {timeout_s:.0f} s")
            time.sleep(0.1)

    def probe_ssh(self, port: int) -> bool:
        return probe_ssh_banner(port)

    def remove(self, pod_id: str) -> None:
        result = self._run(["rm", "-f", "-t", "2", self.container_name(pod_id)])
        if result.returncode != 0 and "no such container" not in result.stderr.lower():
            raise BackendError(f"podman rm of {self.container_name(pod_id)} failed: {result.stderr.strip()[-300:]}")

    def kill(self, pod_id: str, grace_s: float) -> int | None:
        name = self.container_name(pod_id)
        # podman stop sends SIGTERM, waits up to the grace (whole seconds: rounded up, so a grace of 0.4 s
        # is not an immediate SIGKILL), then SIGKILL.
        self._run(["stop", "-t", str(max(0, math.ceil(grace_s))), name], timeout_s=grace_s + 60)
        info = self._inspect(pod_id)
        self.remove(pod_id)
        return None if info is None else info.get("State", {}).get("ExitCode")

    def list_containers(self) -> dict[str, ContainerState] | None:
        result = self._run(["ps", "-a", "--filter", f"label={LABEL_STATE}={self.state_dir}", "--format", "json"])
        if result.returncode != 0:
            raise BackendError(f"podman ps failed: {result.stderr.strip()[-300:]}")
        try:
            rows = json.loads(result.stdout or "[]")
        except json.JSONDecodeError:
            raise BackendError("podman ps returned something that is not JSON") from None
        found: dict[str, ContainerState] = {}
        for row in rows:
            labels = row.get("Labels") or {}
            if labels.get(LABEL_STATE) != self.state_dir or not labels.get(LABEL_POD):
                continue
            gen = labels.get(LABEL_GEN)
            found[labels[LABEL_POD]] = ContainerState(
                pod_id=labels[LABEL_POD],
                gen=int(gen) if gen and gen.isdigit() else None,
                running=row.get("State") == "running",
                container_id=str(row.get("Id", "")),
            )
        return found

    def remove_container(self, container_id: str) -> None:
        result = self._run(["rm", "-f", "-t", "0", container_id])
        if result.returncode != 0 and "no such container" not in result.stderr.lower():
            raise BackendError(f"podman rm of container {container_id[:12]} failed: {result.stderr.strip()[-300:]}")

    def container_logs(self, pod_id: str) -> list[tuple[float, str]]:
        result = self._run(["logs", "-t", self.container_name(pod_id)], timeout_s=30)
        if result.returncode != 0:
            return []
        lines = []
        for raw in (result.stdout + result.stderr).splitlines():
            stamp, _sep, text = raw.partition(" ")
            try:
                lines.append((parse_rfc3339(stamp), text))
            except ValueError:
                continue
        lines.sort(key=lambda item: item[0])
        return lines


def default_image() -> str:
    """The local pod image this checkout builds: localhost/trainops-pod:<hash of emulator/image/'s inputs>."""
    tag_script = Path(__file__).resolve().parents[2] / "image" / "tag.sh"
    try:
        result = subprocess.run([str(tag_script)], capture_output=True, text=True, timeout=30, check=False)
    except OSError as exc:
        raise BackendError(f"{tag_script} cannot run: {exc}") from None
    if result.returncode != 0 or not result.stdout.strip():
        raise BackendError(f"{tag_script} failed: {result.stderr.strip()}")
    return f"{IMAGE_REPOSITORY}:{result.stdout.strip()}"


def variant_image(variant: str) -> str:
    """The local image of a variant: localhost/trainops-pod-<variant>:<emulator/image/variant.sh <variant> --tag>."""
    script = Path(__file__).resolve().parents[2] / "image" / "variant.sh"
    try:
        result = subprocess.run(
            [str(script), variant, "--tag"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        raise BackendError(f"{script} cannot run: {exc}") from None
    if result.returncode != 0 or not result.stdout.strip():
        raise BackendError(f"{script} {variant} --tag failed: {result.stderr.strip()}")
    return f"{IMAGE_REPOSITORY}-{variant}:{result.stdout.strip()}"


def run_command(
    image: str,
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    hostname: str | None = None,
    labels: Mapping[str, str] | None = None,
    publish_ssh: bool = True,
    mounts: Iterable[tuple[Path | str, str, bool]] = (),
    base_env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The one definition of how a pod container is started: (podman arguments, podman's environment).

    The emulator's backend, `runpod_emulator.doctor` and the pod image tests all start containers through
    this. Detached, with an init (`--init`: catatonit reaps processes and a stop takes no 10 s), sshd's
    22/tcp published on 127.0.0.1 only. Env values travel in podman's environment (`-e NAME`), never on its
    command line where `ps` would show them; only names podman itself reads from its environment go inline.
    """
    args = ["run", "-d", "--init", "--name", name]
    if hostname:
        args += ["--hostname", hostname]
    for key, value in (labels or {}).items():
        args += ["--label", f"{key}={value}"]
    if publish_ssh:
        args += ["-p", "127.0.0.1::22"]
    podman_env = dict(os.environ if base_env is None else base_env)
    for key, value in (env or {}).items():
        if key in _PODMAN_OWN_ENV:
            args += ["-e", f"{key}={value}"]
        else:
            podman_env[key] = value
            args += ["-e", key]
    for host_dir, container_path, read_only in mounts:
        args += ["-v", f"{host_dir}:{container_path}{':ro' if read_only else ''}"]
    args.append(image)
    return args, podman_env


def published_ssh_port(info: dict) -> int | None:
    ports = (info.get("NetworkSettings") or {}).get("Ports") or {}
    for binding in ports.get("22/tcp") or []:
        port = str(binding.get("HostPort", ""))
        if port.isdigit():
            return int(port)
    return None


def probe_ssh_banner(port: int, timeout_s: float = 1.0) -> bool:
    """True when 127.0.0.1:port answers with an SSH identification string.

    A published port accepts connections before sshd runs (the port forwarder listens), so the banner,
    not the connect, is the proof.
    """
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            return conn.recv(8).startswith(b"SSH-")
    except OSError:
        return False
