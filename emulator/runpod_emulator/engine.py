"""The reconciler: walks pods through PROVISIONING -> STARTING -> RUNNING and keeps containers in line.

Request threads only change records (status, `gen`); this engine makes the backend follow, one
operation per pod at a time, on a small thread pool (inline for the instant `memory` backend), so no
request ever waits on a container. Every result is applied only if the pod's `gen` is unchanged; an
operation overtaken by a stop or restart leaves nothing behind because the next tick converges again.
A monitor pass notices containers that died or vanished (host failure -> EXITED) and removes
containers of this emulator that no record claims.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .backends import BackendError, ContainerState, LaunchSpec, PodBackend
from .clock import Clock
from .lifecycle import transition
from .models import ACTIVE, Pod
from .persist import atomic_write_bytes
from .store import Store

LOG = logging.getLogger("runpod_emulator.engine")
SHIM = Path(__file__).resolve().parent / "pod_shim" / "nvidia-smi"
SHIM_DATA_IN_POD = "/etc/runpod-emulator"


class Engine:
    """Drives every pod's backend state toward its record; see the module docstring."""

    def __init__(
        self,
        store: Store,
        backend: PodBackend,
        clock: Clock,
        ssh_timeout_s: float = 180.0,
        tick_s: float = 0.05,
        monitor_s: float = 2.0,
        workers: int = 4,
    ) -> None:
        self.store = store
        self.backend = backend
        self.clock = clock
        self.ssh_timeout_s = ssh_timeout_s
        self.tick_s = tick_s
        self.monitor_s = monitor_s
        self._inflight: set[str] = set()
        self._op_done_at: dict[str, float] = {}
        self._kill_requests: dict[str, tuple[float, threading.Event]] = {}
        # pod id -> monotonic time before which a failed operation is not retried
        self._backoff: dict[str, float] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._pool = None if backend.instant else ThreadPoolExecutor(workers, thread_name_prefix="pod-op")
        self._thread: threading.Thread | None = None
        self._next_monitor = 0.0
        self._paused = False

    # Lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        self.reconcile_at_start()
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def wake(self) -> None:
        self._wake.set()

    def pause(self) -> None:
        """Start no operation until `resume` (those under way still finish: see `wait_idle`)."""
        with self.store.lock:
            self._paused = True

    def resume(self) -> None:
        with self.store.lock:
            self._paused = False
        self.wake()

    def idle(self) -> bool:
        with self.store.lock:
            return not self._inflight

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.tick_s)
            self._wake.clear()
            try:
                self.tick()
                if time.monotonic() >= self._next_monitor:
                    self._next_monitor = time.monotonic() + self.monitor_s
                    self.monitor()
            except Exception:  # the engine must outlive any one bad record or podman hiccup
                LOG.exception("engine tick failed")

    # Decisions -----------------------------------------------------------------------------------------

    def tick(self) -> None:
        steps: list[tuple[str, Callable[[], None]]] = []
        with self.store.lock:
            if self._paused:
                return
            now = self.clock.now()
            moment = time.monotonic()
            for pod in self.store.pods.values():
                if pod.id in self._inflight or pod.internal.inert or self._backoff.get(pod.id, 0) > moment:
                    continue
                step = self._decide(pod, now)
                if step is not None:
                    self._inflight.add(pod.id)
                    steps.append((pod.id, step))
        for pod_id, step in steps:
            if self._pool is None:
                self._run_step(pod_id, step)
            else:
                self._pool.submit(self._run_step, pod_id, step)

    def _run_step(self, pod_id: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception:
            LOG.exception("operation on pod %s failed", pod_id)
        finally:
            with self.store.lock:
                self._inflight.discard(pod_id)
                self._op_done_at[pod_id] = time.monotonic()
            self._wake.set()

    def _decide(self, pod: Pod, now: float) -> Callable[[], None] | None:
        pod_id, gen = pod.id, pod.internal.gen
        if pod_id in self._kill_requests:
            grace, done = self._kill_requests[pod_id]
            return lambda: self._kill(pod_id, grace, done)
        if pod.status not in ACTIVE:
            if pod.internal.container_present:
                return lambda: self._remove(pod_id)
            if pod.terminated:
                return lambda: self._forget(pod_id)
            return None
        if pod.internal.container_present and pod.internal.container_gen != gen:
            return lambda: self._remove(pod_id)
        if not pod.internal.container_present:
            if now >= pod.internal.status_since + self.backend.provision_s:
                return lambda: self._launch(pod_id, gen)
            return None
        if pod.status != "RUNNING":
            if now >= pod.internal.status_since + self.backend.start_s:
                return lambda: self._confirm_running(pod_id, gen)
            return None
        if (
            pod.internal.ssh_wanted
            and pod.internal.ssh_port
            and not pod.internal.ssh_ready
            and now < pod.internal.ssh_deadline
            and now >= pod.internal.ssh_next_probe
        ):
            port = pod.internal.ssh_port
            return lambda: self._probe(pod_id, gen, port)
        return None

    # Operations (outside the lock; results applied under it) ----------------------------------------------

    def _launch(self, pod_id: str, gen: int) -> None:
        with self.store.lock:
            pod = self.store.pods.get(pod_id)
            if pod is None or pod.internal.gen != gen:
                return
            spec = self._launch_spec(pod)
        error = None
        try:
            self.backend.launch(spec)
        except Exception as exc:  # any failure is the pod's ERROR, never a retry loop
            error = str(exc) or type(exc).__name__
        with self.store.lock:
            pod = self.store.pods.get(pod_id)
            if pod is None:
                return
            now = self.clock.now()
            if error is None:
                pod.internal.container_present = True
                pod.internal.container_gen = gen
            if pod.internal.gen != gen:
                self.store.save_pod(pod)
                return
            if error is not None:
                transition(self.store, now, pod, "ERROR", error)
            elif pod.status == "PROVISIONING":
                transition(self.store, now, pod, "STARTING", "container created")
            else:
                pod.internal.status_since = now
                self.store.append_log(pod_id, "system", "container created", now)
                self.store.save_pod(pod)

    def _launch_spec(self, pod: Pod) -> LaunchSpec:
        env = dict(pod.env)
        env.update(
            {
                "RUNPOD_POD_ID": pod.id,
                "RUNPOD_POD_HOSTNAME": pod.id,
                "RUNPOD_DC_ID": pod.data_center_id,
                "RUNPOD_GPU_COUNT": str(pod.gpu_count),
                "RUNPOD_CPU_COUNT": str(pod.cpu.vcpu_count) if pod.cpu else "",
            }
        )
        if pod.internal.ssh_public_key and "PUBLIC_KEY" not in pod.env:
            env["PUBLIC_KEY"] = pod.internal.ssh_public_key
        mounts: list[tuple[Path, str, bool]] = []
        if self.backend.instant:
            return LaunchSpec(pod.id, pod.internal.gen, env, pod.exposes_ssh, mounts, pod.image)
        pod_dir = self.store.pod_dir(pod.id)
        persistent = pod.mounts.get("persistent")
        if persistent:
            host = pod_dir / "persistent"
            host.mkdir(parents=True, exist_ok=True)
            mounts.append((host, persistent["path"], False))
        for network in pod.mounts.get("network", []):
            host = self.store.volume_dir(network["volumeId"])
            host.mkdir(parents=True, exist_ok=True)
            mounts.append((host, network["path"], False))
        if pod.gpu:
            shim_data = pod_dir / "emulator"
            conf = (
                f"count={pod.internal.gpu_effective_count}\nname={pod.internal.gpu_name} (emulated)\n"
                f"memory_mib={pod.internal.gpu_memory_mib}\npod_id={pod.id}\ncuda={pod.cuda_version}\n"
            )
            atomic_write_bytes(shim_data / "gpus.conf", conf.encode(), mode=0o644)
            mounts.append((shim_data, SHIM_DATA_IN_POD, True))
            mounts.append((SHIM, "/usr/local/bin/nvidia-smi", True))
        return LaunchSpec(pod.id, pod.internal.gen, env, pod.exposes_ssh, mounts, pod.image)

    def _confirm_running(self, pod_id: str, gen: int) -> None:
        error = None
        port = None
        try:
            port = self.backend.wait_running(pod_id, timeout_s=60)
        except Exception as exc:  # any failure is the pod's ERROR, never a retry loop
            error = str(exc) or type(exc).__name__
        with self.store.lock:
            pod = self.store.pods.get(pod_id)
            if pod is None or pod.internal.gen != gen:
                return
            now = self.clock.now()
            if error is not None:
                transition(self.store, now, pod, "ERROR", error)
                return
            transition(self.store, now, pod, "RUNNING", "container running")
            pod.internal.ssh_port = port if pod.exposes_ssh else None
            pod.internal.ssh_deadline = now + self.ssh_timeout_s
            pod.internal.ssh_next_probe = now
            self.store.save_pod(pod)

    def _probe(self, pod_id: str, gen: int, port: int) -> None:
        answered = self.backend.probe_ssh(port)
        with self.store.lock:
            pod = self.store.pods.get(pod_id)
            if pod is None or pod.internal.gen != gen or pod.status != "RUNNING":
                return
            now = self.clock.now()
            if answered:
                pod.internal.ssh_ready = True
                self.store.append_log(pod_id, "system", f"sshd answers on 127.0.0.1:{port}", now)
                self.store.save_pod(pod)
            else:
                pod.internal.ssh_next_probe = now + 0.1
                if now + 0.1 >= pod.internal.ssh_deadline:
                    self.store.append_log(pod_id, "system", f"sshd did not answer within {self.ssh_timeout_s} s", now)

    def _remove(self, pod_id: str) -> None:
        try:
            self.backend.remove(pod_id)
        except BackendError as exc:
            LOG.warning("%s (retrying in 2 s)", exc)
            with self.store.lock:
                self._backoff[pod_id] = time.monotonic() + 2.0
            return
        with self.store.lock:
            pod = self.store.pods.get(pod_id)
            if pod is not None:
                pod.internal.container_present = False
                pod.internal.container_gen = None
                self.store.save_pod(pod)

    def _forget(self, pod_id: str) -> None:
        """A terminated pod's persistent disk and logs go (the API no longer shows them); its record stays
        (inert) for the billing ledger."""
        self.store.delete_pod_data(pod_id)
        with self.store.lock:
            pod = self.store.pods.get(pod_id)
            if pod is not None:
                pod.internal.inert = True
                self.store.save_pod(pod)
                self.store.drop_logs(pod_id)

    def _kill(self, pod_id: str, grace_s: float, done: threading.Event) -> None:
        exit_code = None
        try:
            exit_code = self.backend.kill(pod_id, grace_s)
        except BackendError as exc:
            LOG.warning("%s", exc)
        with self.store.lock:
            self._kill_requests.pop(pod_id, None)
            pod = self.store.pods.get(pod_id)
            if pod is None:
                done.set()
                return
            pod.internal.container_present = False
            pod.internal.container_gen = None
            pod.internal.gen += 1
            if exit_code is not None:
                detail = "after SIGTERM" if exit_code != 137 else "SIGKILL after the grace"
                self.store.append_log(
                    pod_id, "system", f"container stopped: exit code {exit_code} ({detail})", self.clock.now()
                )
            if pod.status in ACTIVE:
                transition(self.store, self.clock.now(), pod, "EXITED", "host failure (killed by the admin API)")
            else:
                self.store.save_pod(pod)
        done.set()

    def request_kill(self, pod_id: str, grace_s: float) -> threading.Event:
        done = threading.Event()
        with self.store.lock:
            self._kill_requests[pod_id] = (grace_s, done)
        self.wake()
        return done

    # Reconciling with what podman really has ---------------------------------------------------------------

    def reconcile_at_start(self) -> None:
        """After a restart: adopt live containers, mark pods whose container vanished EXITED, drop orphans."""
        containers = self.backend.list_containers()
        with self.store.lock:
            now = self.clock.now()
            for pod in self.store.pods.values():
                if pod.internal.inert:
                    continue
                if containers is None:
                    continue  # memory backend: records are the whole truth
                found = containers.get(pod.id)
                pod.internal.container_present = found is not None
                pod.internal.container_gen = found.gen if found is not None else None
                alive = found is not None and found.running and found.gen == pod.internal.gen
                if pod.status in ("STARTING", "RUNNING") and not alive:
                    pod.internal.gen += 1
                    transition(self.store, now, pod, "EXITED", "container vanished while the emulator was down")
                elif pod.status == "RUNNING":
                    pod.internal.ssh_ready = False
                    pod.internal.ssh_deadline = now + self.ssh_timeout_s
                    pod.internal.ssh_next_probe = now
                    self.store.save_pod(pod)
                else:
                    self.store.save_pod(pod)
            orphans = [
                found
                for pod_id, found in (containers or {}).items()
                if pod_id not in self.store.pods or self.store.pods[pod_id].internal.inert
            ]
        for found in orphans:
            self._remove_orphan(found)

    def _remove_orphan(self, found: ContainerState) -> None:
        LOG.warning("removing container %s of unknown pod %s", found.container_id[:12], found.pod_id)
        try:
            self.backend.remove_container(found.container_id)
        except BackendError as exc:
            LOG.warning("%s", exc)

    def monitor(self) -> None:
        started = time.monotonic()
        try:
            containers = self.backend.list_containers()
        except BackendError as exc:
            LOG.warning("%s", exc)
            return
        if containers is None:
            return
        orphans = []
        with self.store.lock:
            now = self.clock.now()
            for pod_id, found in containers.items():
                pod = self.store.pods.get(pod_id)
                quiet = pod_id not in self._inflight and self._op_done_at.get(pod_id, 0) < started
                if pod is None or pod.internal.inert:
                    if quiet:
                        orphans.append(found)
                elif quiet and not pod.internal.container_present:
                    pod.internal.container_present = True
                    pod.internal.container_gen = found.gen
            for pod in self.store.pods.values():
                pod_id = pod.id
                if pod_id in self._inflight or self._op_done_at.get(pod_id, 0) >= started:
                    continue
                if pod.status not in ("STARTING", "RUNNING") or not pod.internal.container_present:
                    continue
                found = containers.get(pod_id)
                if found is None or (found.gen == pod.internal.gen and not found.running):
                    pod.internal.container_present = found is not None
                    pod.internal.gen += 1
                    transition(self.store, now, pod, "EXITED", "container stopped unexpectedly (host failure)")
        for found in orphans:
            self._remove_orphan(found)

    def remove_all_containers(self) -> None:
        """Remove every container of this emulator, whatever pod it belongs to (admin reset; pause first)."""
        for found in (self.backend.list_containers() or {}).values():
            self.backend.remove_container(found.container_id)

    def pod_limits(self, body: dict) -> list[str]:
        """What the backend cannot run in a pod create or update body (schema-valid): see PodBackend.check_pod."""
        return [f"{error} (a limit of the {self.backend.name} backend)" for error in self.backend.check_pod(body)]

    def pod_logs(self, pod_id: str) -> list[tuple[float, str]]:
        """(epoch, line) of the output of the pod's current container."""
        return self.backend.container_logs(pod_id)

    def wait_idle(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.idle():
                return True
            time.sleep(0.05)
        return False
