"""The v2 operations: validation, placement and record changes. HTTP lives in server.py, containers in engine.py.

Each public method takes the parsed request (path ids, query as a dict of lists, JSON body) and returns
(status, body) or raises ApiError; the order is always validate first, then change anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from . import catalog, ledger, pricing, schema
from .clock import Clock, parse_rfc3339, to_rfc3339
from .engine import Engine
from .lifecycle import new_id, transition
from .models import ACTIONS_BY_STATUS, NetworkVolume, Pod, PodCpu, PodGpu, PodInternal, VolumeInternal
from .problems import ApiError, bad_request, conflict, not_found
from .store import Store

DEFAULT_DISK_GB = 20
# Fields of a pod that PATCH /v2/pods/{id} sets as sent: API name -> attribute of Pod.
_UPDATABLE_POD_FIELDS = {
    "name": "name",
    "image": "image",
    "args": "args",
    "disk": "disk",
    "env": "env",
    "registry": "registry",
    "locked": "locked",
    "globalNetworking": "global_networking",
}
Result = tuple[int, Any]


def api_view(pod: Pod, now: float) -> dict[str, Any]:
    """The pod as the API shows it, with its `cost` now."""
    return pod.to_api(now, cost=pricing.pod_cost(pod))


@dataclass
class _CreateRequest:
    """What a valid create body asks for, resolved against the catalog (placement aside)."""

    cloud: str
    mounts: dict[str, Any]
    gpu: dict[str, Any] | None
    gpu_type: catalog.GpuType | None
    cpu: dict[str, Any] | None
    flavor: catalog.CpuFlavor | None


class Service:
    """RunPod v2 semantics over a Store, with an Engine that makes the backend follow."""

    def __init__(self, store: Store, engine: Engine, clock: Clock) -> None:
        self.store = store
        self.engine = engine
        self.clock = clock

    # Pods ----------------------------------------------------------------------------------------------

    def _pod(self, pod_id: str) -> Pod:
        pod = self.store.pods.get(pod_id)
        if pod is None or pod.terminated:
            raise not_found("pod", pod_id)
        return pod

    def list_pods(self, query: dict[str, list[str]]) -> Result:
        raw = query.get("includeClusterPods", ["false"])[0]
        if raw not in ("true", "false"):
            raise schema.unprocessable([f"includeClusterPods: {raw!r} is not a boolean"])
        with self.store.lock:
            now = self.clock.now()
            pods = [api_view(p, now) for p in self.store.pods.values() if not p.terminated]
        pods.sort(key=lambda p: p["createdAt"])
        return 200, {"pods": pods}

    def get_pod(self, pod_id: str) -> Result:
        with self.store.lock:
            return 200, api_view(self._pod(pod_id), self.clock.now())

    def create_pod(self, body: Any) -> Result:
        body = schema.require_object(body)
        hardware = self._checked_create(body)
        with self.store.lock:
            volume = self._attachable_volume(hardware.mounts)
            center = self._place(body, hardware.gpu, volume)
            now = self.clock.now()
            pod = self._new_pod(body, hardware, center, now)
            ledger.open_segment(pod.internal.ledger, now, pricing.pod_rates(pod, "PROVISIONING"))
            self.store.pods[pod.id] = pod
            self.store.append_log(pod.id, "system", f"pod created in {center.id}", now)
            self.store.save_pod(pod)
            result = api_view(pod, now)
        self.engine.wake()
        return 201, result

    def _checked_create(self, body: dict[str, Any]) -> _CreateRequest:
        """Validate a create body (all but placement); what it asks for, resolved against the catalog."""
        schema.require_valid(body, schema.CREATE_POD)
        self._require_runnable(body)
        if "templateId" in body:
            raise ApiError(404, f"template {body['templateId']} not found (templates are not emulated)")
        if "image" not in body:
            raise schema.unprocessable(["$: missing required property 'image'"])
        gpu, cpu = body.get("gpu"), body.get("cpu")
        if gpu is not None and cpu is not None:
            raise bad_request("exactly one of gpu or cpu must be set, not both")
        if gpu is None and cpu is None:
            raise bad_request("exactly one of gpu or cpu must be set")
        mounts = _normalised_mounts(body.get("mounts"))
        if "persistent" in mounts and "network" in mounts:
            raise bad_request("mounts.persistent and mounts.network are mutually exclusive")
        if cpu is not None and "persistent" in mounts:
            raise bad_request("mounts.persistent is not allowed on CPU pods: use a network volume")
        if gpu is not None and gpu.get("allowedCudaVersions") and "minCudaVersion" in gpu:
            raise bad_request("gpu.allowedCudaVersions and gpu.minCudaVersion are mutually exclusive")
        cloud = body.get("cloud", "SECURE")
        gpu_type = self._check_gpu(gpu, cloud) if gpu is not None else None
        flavor = self._check_cpu(cpu) if cpu is not None else None
        if cpu is not None and cloud != "SECURE":
            raise bad_request("CPU pods run on SECURE cloud only")
        return _CreateRequest(cloud, mounts, gpu, gpu_type, cpu, flavor)

    def _require_runnable(self, body: dict[str, Any]) -> None:
        """The backend's own limits (podman: env names, mount paths), beyond RunPod's schema: 422."""
        errors = self.engine.pod_limits(body)
        if errors:
            raise schema.unprocessable(errors)

    def _new_pod(self, body: dict[str, Any], hardware: _CreateRequest, center: catalog.DataCenter, now: float) -> Pod:
        env = dict(body.get("env", {}))
        keys = self.store.account["sshKeys"]
        gpu, gpu_type, cpu, flavor = hardware.gpu, hardware.gpu_type, hardware.cpu, hardware.flavor
        pod = Pod(
            id=self._unused_pod_id(),
            name=body["name"],
            image=body["image"],
            args=body.get("args", ""),
            disk=body.get("disk", DEFAULT_DISK_GB),
            env=env,
            ports=list(dict.fromkeys(body.get("ports", []))),
            registry=body.get("registry"),
            cloud=hardware.cloud,
            data_center_id=center.id,
            cuda_version=center.cuda_version if gpu is not None else None,
            gpu=PodGpu(gpu["id"], gpu.get("count", 1)) if gpu is not None else None,
            cpu=(
                PodCpu(cpu["id"], cpu["vcpuCount"], int(cpu["vcpuCount"] * flavor.ram_gb_per_vcpu))
                if cpu is not None and flavor is not None
                else None
            ),
            mounts=hardware.mounts,
            locked=False,
            global_networking=bool(body.get("globalNetworking", False)),
            created_at=now,
            started_at=None,
            status="PROVISIONING",
            internal=PodInternal(
                status_since=now,
                gpu_effective_count=gpu.get("count", 1) if gpu is not None else 0,
                gpu_name=gpu_type.id if gpu_type else None,
                gpu_memory_mib=gpu_type.memory_mib if gpu_type else None,
                ssh_public_key="\n".join(keys) if body.get("startSsh") and keys and "PUBLIC_KEY" not in env else None,
                public_ip=center.public_ip(hardware.cloud),
            ),
        )
        pod.refresh_ssh_wanted()
        return pod

    def _unused_pod_id(self) -> str:
        while True:
            candidate = new_id()
            if candidate not in self.store.pods:
                return candidate

    @staticmethod
    def _check_gpu(gpu: dict[str, Any], cloud: str) -> catalog.GpuType:
        found = catalog.gpu_type(gpu["id"])
        if found is None:
            raise bad_request(f"unknown GPU type {gpu['id']!r}: see GET /v2/catalog/gpus")
        count = gpu.get("count", 1)
        if count > found.max_count:
            raise bad_request(f"gpu.count {count} exceeds the maximum of {found.max_count} for {found.id}")
        if cloud == "COMMUNITY" and not found.community:
            raise bad_request(f"{found.id} is not offered on COMMUNITY cloud")
        return found

    @staticmethod
    def _check_cpu(cpu: dict[str, Any]) -> catalog.CpuFlavor:
        flavor = catalog.cpu_flavor(cpu["id"])
        if flavor is None:
            raise bad_request(f"unknown CPU flavor {cpu['id']!r}: see GET /v2/catalog/cpus")
        count = cpu["vcpuCount"]
        if count & (count - 1) or not flavor.min_vcpu <= count <= flavor.max_vcpu:
            raise bad_request(
                f"cpu.vcpuCount {count} must be a power of two from {flavor.min_vcpu} to {flavor.max_vcpu}"
            )
        return flavor

    def _attachable_volume(self, mounts: dict[str, Any]) -> NetworkVolume | None:
        networks = mounts.get("network") or []
        if not networks:
            return None
        return self._volume(networks[0]["volumeId"])

    def _place(
        self, body: dict[str, Any], gpu: dict[str, Any] | None, volume: NetworkVolume | None
    ) -> catalog.DataCenter:
        wanted = body.get("dataCenterIds") or []
        unknown = [dc for dc in wanted if catalog.data_center(dc) is None]
        if unknown:
            raise bad_request(f"unknown data center(s): {', '.join(unknown)}; see GET /v2/catalog/datacenters")
        candidates = [catalog.data_center(dc) for dc in wanted] or list(catalog.DATA_CENTERS)
        if volume is not None:
            if wanted and volume.data_center not in wanted:
                raise bad_request(
                    f"network volume {volume.id} is in data center {volume.data_center}, "
                    f"which is not among dataCenterIds ({', '.join(wanted)})"
                )
            candidates = [catalog.data_center(volume.data_center)]
        reasons = []
        for center in candidates:
            if center is None:
                continue
            if body.get("globalNetworking") and (gpu is None or not center.global_network):
                reasons.append(f"{center.id}: global networking needs a GPU pod in a globalNetwork data center")
                continue
            if gpu is None:
                return center
            level = center.gpus.get(gpu["id"])
            if level is None or level == "NONE":
                reasons.append(f"{center.id}: no {gpu['id']} available")
                continue
            allowed = gpu.get("allowedCudaVersions") or []
            if allowed and center.cuda_version not in allowed:
                reasons.append(f"{center.id}: host CUDA {center.cuda_version} not in allowedCudaVersions")
                continue
            floor = gpu.get("minCudaVersion")
            if floor and catalog.cuda_tuple(center.cuda_version) < catalog.cuda_tuple(floor):
                reasons.append(f"{center.id}: host CUDA {center.cuda_version} below minCudaVersion {floor}")
                continue
            return center
        raise bad_request("no host can place this pod: " + "; ".join(reasons))

    def update_pod(self, pod_id: str, body: Any) -> Result:
        body = schema.require_object(body)
        with self.store.lock:
            pod = self._pod(pod_id)
            schema.require_valid(body, schema.UPDATE_POD)
            self._require_runnable(body)
            if "templateId" in body:
                raise ApiError(404, f"template {body['templateId']} not found (templates are not emulated)")
            mounts = self._patched_mounts(pod, body.get("mounts"))
            if body.get("globalNetworking"):
                center = catalog.data_center(pod.data_center_id)
                if not pod.gpu or center is None or not center.global_network:
                    raise bad_request("global networking needs a GPU pod in a globalNetwork data center")
            for name, attribute in _UPDATABLE_POD_FIELDS.items():
                if name in body:
                    setattr(pod, attribute, body[name])
            if "ports" in body:
                pod.ports = list(dict.fromkeys(body["ports"]))
            pod.mounts = mounts
            pod.refresh_ssh_wanted()
            now = self.clock.now()
            ledger.follow_rates(pod.internal.ledger, now, pricing.pod_rates(pod, pod.status))
            self.store.save_pod(pod)
            return 200, api_view(pod, now)

    @staticmethod
    def _patched_mounts(pod: Pod, patch: dict[str, Any] | None) -> dict[str, Any]:
        current = pod.mounts
        if not patch:
            return current
        if patch.get("network") == []:
            raise bad_request("mounts.network: [] would clear the mount; clearing mounts is not supported")
        if "persistent" in patch and "network" in patch:
            raise bad_request("mounts.persistent and mounts.network are mutually exclusive")
        result = dict(current)
        if "persistent" in patch:
            if "persistent" not in current:
                raise bad_request("mount kind is fixed at create: this pod has no persistent mount")
            if patch["persistent"]["size"] < current["persistent"]["size"]:
                raise bad_request("mounts.persistent.size cannot decrease")
            result["persistent"] = dict(patch["persistent"])
        if "network" in patch:
            if "network" not in current:
                raise bad_request("mount kind is fixed at create: this pod has no network mount")
            if patch["network"][0]["volumeId"] != current["network"][0]["volumeId"]:
                raise bad_request("mounts.network[0].volumeId is immutable")
            result["network"] = [dict(patch["network"][0])]
        return result

    def pod_action(self, pod_id: str, body: Any) -> Result:
        body = schema.require_object(body)
        with self.store.lock:
            pod = self._pod(pod_id)
            schema.require_valid(body, schema.POD_ACTION)
            action = body["action"]
            if action not in ACTIONS_BY_STATUS[pod.status]:
                raise conflict(
                    f"action {action!r} is not valid for pod {pod_id} in status {pod.status}; "
                    f"allowed now: {', '.join(ACTIONS_BY_STATUS[pod.status]) or 'none'}"
                )
            if action in ("stop", "restart") and pod.locked:
                raise conflict(f"pod {pod_id} is locked: unlock it (PATCH locked=false) before {action}")
            now = self.clock.now()
            pod.internal.gen += 1
            if action == "terminate":
                transition(self.store, now, pod, "TERMINATED", "terminated by the API")
                self.engine.wake()
                return 204, None
            if action == "stop":
                transition(self.store, now, pod, "EXITED", "stopped by the API")
            elif action == "start":
                if pod.gpu:
                    pod.internal.gpu_effective_count = pod.gpu.count
                transition(self.store, now, pod, "STARTING", "started by the API")
            else:
                transition(self.store, now, pod, "STARTING", "restarted by the API")
            result = api_view(pod, now)
        self.engine.wake()
        return 200, result

    def delete_pod(self, pod_id: str) -> Result:
        with self.store.lock:
            pod = self._pod(pod_id)
            pod.internal.gen += 1
            transition(self.store, self.clock.now(), pod, "TERMINATED", "deleted by the API")
        self.engine.wake()
        return 204, None

    # Logs ----------------------------------------------------------------------------------------------

    def log_request(self, pod_id: str, query: dict[str, list[str]], last_event_id: str | None) -> dict[str, Any]:
        """Validate a logs request; returns {source, start_after (epoch or None), tail}."""
        with self.store.lock:
            self._pod(pod_id)
        source = query.get("source", [None])[0]
        if source is not None and source not in ("container", "system"):
            raise schema.unprocessable([f"source: {source!r} is not one of container, system"])
        tail = schema.query_int(query, "tail", 100, 0, 5000)
        # Both are validated; Last-Event-ID (strictly after) wins over since (at or after).
        moments = {}
        for name, raw in (("since", query.get("since", [None])[0]), ("Last-Event-ID", last_event_id)):
            if raw is None:
                continue
            try:
                moments[name] = parse_rfc3339(raw)
            except ValueError:
                raise schema.unprocessable([f"{name}: {raw!r} is not an RFC 3339 date-time"]) from None
        start_after = moments.get("Last-Event-ID", moments["since"] - 1e-6 if "since" in moments else None)
        return {"source": source, "start_after": start_after, "tail": tail}

    def log_events(self, pod_id: str, source: str | None, after: float | None) -> list[dict[str, Any]]:
        """Log events of the pod (system lines and its container's output), oldest first, newer than `after`."""
        with self.store.lock:
            pod = self.store.pods.get(pod_id)
            events = list(self.store.logs.get(pod_id, [])) if pod is not None else []
            container = pod is not None and pod.internal.container_present
        if container and source in (None, "container"):
            output = self.engine.pod_logs(pod_id)
            events += [{"t": t, "source": "container", "line": line} for t, line in output]
            events.sort(key=lambda e: e["t"])
        return [e for e in events if (source is None or e["source"] == source) and (after is None or e["t"] > after)]

    def pod_gone(self, pod_id: str) -> bool:
        with self.store.lock:
            pod = self.store.pods.get(pod_id)
            return pod is None or pod.terminated

    # Network volumes -----------------------------------------------------------------------------------

    def _volume(self, volume_id: str) -> NetworkVolume:
        volume = self.store.volumes.get(volume_id)
        if volume is None or volume.deleted:
            raise not_found("network volume", volume_id)
        return volume

    def list_volumes(self) -> Result:
        with self.store.lock:
            volumes = [v.to_api() for v in self.store.volumes.values() if not v.deleted]
        return 200, {"networkVolumes": volumes}

    def get_volume(self, volume_id: str) -> Result:
        with self.store.lock:
            return 200, self._volume(volume_id).to_api()

    def create_volume(self, body: Any) -> Result:
        body = schema.require_object(body)
        schema.require_valid(body, schema.CREATE_VOLUME)
        center = catalog.data_center(body["dataCenter"])
        if center is None:
            raise bad_request(f"unknown data center {body['dataCenter']!r}; see GET /v2/catalog/datacenters")
        kind = body.get("type", "STANDARD")
        if kind not in center.volume_types:
            raise bad_request(f"data center {center.id} offers no {kind} network volumes")
        with self.store.lock:
            now = self.clock.now()
            volume = NetworkVolume(
                id=self._unused_volume_id(),
                name=body["name"],
                size=body["size"],
                data_center=center.id,
                type=kind,
                internal=VolumeInternal(created_at=now),
            )
            ledger.open_segment(volume.internal.ledger, now, pricing.volume_rates(volume))
            self.store.volume_dir(volume.id).mkdir(parents=True, exist_ok=True)
            self.store.volumes[volume.id] = volume
            self.store.save_volume(volume)
            return 201, volume.to_api()

    def _unused_volume_id(self) -> str:
        while True:
            candidate = new_id(10)
            if candidate not in self.store.volumes:
                return candidate

    def update_volume(self, volume_id: str, body: Any) -> Result:
        body = schema.require_object(body)
        with self.store.lock:
            volume = self._volume(volume_id)
            schema.require_valid(body, schema.UPDATE_VOLUME)
            if "size" in body and body["size"] < volume.size:
                raise bad_request(
                    f"network volume size can only increase: {body['size']} GB < current {volume.size} GB"
                )
            volume.name = body.get("name", volume.name)
            volume.size = body.get("size", volume.size)
            ledger.open_segment(volume.internal.ledger, self.clock.now(), pricing.volume_rates(volume))
            self.store.save_volume(volume)
            return 200, volume.to_api()

    def delete_volume(self, volume_id: str) -> Result:
        with self.store.lock:
            volume = self._volume(volume_id)
            users = [p.id for p in self.store.pods.values() if not p.terminated and volume_id in p.network_volume_ids()]
            if users:
                raise conflict(f"network volume {volume_id} is attached to pod(s) {', '.join(users)}")
            now = self.clock.now()
            volume.internal.deleted_at = now
            ledger.close_segment(volume.internal.ledger, now)
            self.store.save_volume(volume)
            self.store.delete_volume_data(volume_id)
        return 204, None

    # Account, catalog, billing -------------------------------------------------------------------------

    def get_ssh_keys(self) -> Result:
        with self.store.lock:
            return 200, {"keys": list(self.store.account["sshKeys"])}

    def put_ssh_keys(self, body: Any) -> Result:
        body = schema.require_object(body)
        schema.require_valid(body, schema.UPDATE_SSH_KEYS)
        with self.store.lock:
            self.store.account["sshKeys"] = list(dict.fromkeys(body["keys"]))
            self.store.save_account()
            return 200, {"keys": list(self.store.account["sshKeys"])}

    def pod_billing(self, query: dict[str, list[str]]) -> Result:
        with self.store.lock:
            pods = [_billed(p.id, p.internal.ledger) for p in self.store.pods.values()]
        return 200, ledger.pod_billing(pods, query, self.clock.now())

    def volume_billing(self, query: dict[str, list[str]]) -> Result:
        with self.store.lock:
            volumes = [_billed(v.id, v.internal.ledger) for v in self.store.volumes.values()]
        return 200, ledger.volume_billing(volumes, query, self.clock.now())

    # Admin ---------------------------------------------------------------------------------------------

    def kill_pod(self, pod_id: str, body: Any) -> Result:
        body = {} if body is None else schema.require_object(body)
        schema.require_valid(body, schema.KILL)
        grace = float(body.get("grace_s", 5))
        with self.store.lock:
            self._pod(pod_id)
        done = self.engine.request_kill(pod_id, grace)
        if not done.wait(grace + 90):
            raise ApiError(504, f"kill of pod {pod_id} did not finish within {grace + 90:.0f} s")
        return self.get_pod(pod_id)

    def restart_without_gpus(self, pod_id: str) -> Result:
        with self.store.lock:
            pod = self._pod(pod_id)
            if not pod.gpu:
                raise bad_request(f"pod {pod_id} is a CPU pod: it has no GPUs to lose")
            pod.internal.gpu_effective_count = 0
            pod.internal.gen += 1
            transition(self.store, self.clock.now(), pod, "STARTING", "restarted without its GPUs (admin API)")
            result = api_view(pod, self.clock.now())
        self.engine.wake()
        return 200, result

    def append_logs(self, pod_id: str, body: Any) -> Result:
        body = schema.require_object(body)
        schema.require_valid(body, schema.APPEND_LOGS)
        with self.store.lock:
            self._pod(pod_id)
            for line in body["lines"]:
                self.store.append_log(pod_id, body.get("source", "container"), line, self.clock.now())
        return 204, None

    def advance_clock(self, body: Any) -> Result:
        body = schema.require_object(body)
        schema.require_valid(body, schema.CLOCK)
        self.clock.advance(float(body["advance_s"]))
        with self.store.lock:
            self.store.account["clockOffset"] = self.clock.offset_s
            self.store.save_account()
        return 200, {"now": to_rfc3339(self.clock.now()), "offset_s": self.clock.offset_s}

    def reset(self, reset_lock: threading.Lock) -> Result:
        """Forget everything and remove every container of this emulator (bounded)."""
        with reset_lock:
            self.engine.pause()
            try:
                self.engine.wait_idle(120)
                self.engine.remove_all_containers()
                with self.store.lock:
                    self.store.wipe()
            finally:
                self.engine.resume()
        return 204, None


def _normalised_mounts(mounts: dict[str, Any] | None) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if not mounts:
        return result
    if mounts.get("persistent"):
        result["persistent"] = dict(mounts["persistent"])
    if mounts.get("network"):
        result["network"] = [dict(mounts["network"][0])]
    return result


def _billed(record_id: str, segments: ledger.Segments) -> dict[str, Any]:
    """What the billing answers need of a pod or volume: its id and a copy of its ledger."""
    return {"id": record_id, "ledger": [dict(segment) for segment in segments]}
