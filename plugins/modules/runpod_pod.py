#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runpod_pod
short_description: Create, start, stop, restart and terminate RunPod pods
version_added: 0.1.0
description:
  - Manages one RunPod pod through the RunPod REST API v2.
  - A pod is found by O(id), or by its exact O(name). RunPod does not keep names unique; when several
    live pods share the name the module fails and lists their ids rather than guess.
  - Every request is validated first, locally and against the catalog (ports, environment names and values,
    mount paths, GPU type and count, where the GPU is offered and with which host CUDA, CPU flavor and vCPU
    count, data centers, the network volume's data center, sizes, options the chosen pod kind would ignore);
    a request that cannot succeed fails before anything is created or changed, in check mode the same way.
  - Every create carries a client token, the environment variable C(TRAINOPS_CREATE_TOKEN), that RunPod keeps
    with the pod. It is not shown in C(env_keys) and never reported as a change.
  - A create that fails with a server error or gets no answer may still have created the pod. The module
    then looks for the pod carrying its token (or name) and adopts it; after no answer at all it keeps
    looking for O(reconcile_window) seconds, as the server may still be creating it. It re-sends the create
    only when nothing appeared, and after every create it fails, listing the ids, when more than one live
    pod carries the token or the name.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - trainops.gpu.runpod
  - trainops.gpu.runpod.create
  - trainops.gpu.runpod.record
  - trainops.gpu.runpod.attributes
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the API (including the catalog validation) but never sends a mutating request.
  diff_mode:
    support: full
options:
  id:
    description:
      - Id of the pod. Takes precedence over O(name) for finding the pod; with both set, O(name) renames it.
        Renaming to a name another live pod has is an error.
      - Ids are assigned by RunPod, so creating a pod needs O(name).
    type: str
  name:
    description:
      - Exact name of the pod. Pods of this collection are named C(<prefix>-<run_id>-<role>).
    type: str
  state:
    description:
      - V(present) makes sure the pod exists. A new pod starts running; an existing pod keeps its run state.
      - V(running) makes sure the pod exists and runs, starting it when it is stopped (C(EXITED)) or in C(ERROR).
      - V(stopped) makes sure an existing pod is stopped (C(EXITED)). Its container disk is wiped; storage
        keeps billing. Fails when the pod does not exist.
      - V(restarted) restarts a running pod, or starts a stopped one. Always reports a change. Fails when
        the pod does not exist.
      - V(absent) terminates the pod. Irreversible. A pod that is already gone is not an error.
      - With O(wait), V(present), V(running) and V(restarted) return once the pod is C(RUNNING) and its
        direct SSH endpoint answers with an SSH banner (C(RUNNING) alone is not ready); V(stopped) once it
        is C(EXITED); V(absent) once it is gone.
    type: str
    choices: [present, running, stopped, restarted, absent]
    default: present
  image:
    description:
      - Container image. Required to create a pod; changing it on an existing pod updates the pod.
    type: str
  gpu_type:
    description:
      - GPU type id from the catalog (see M(trainops.gpu.runpod_catalog_info)), for example
        V(NVIDIA GeForce RTX 4090). Fixed at create.
    type: str
  gpu_count:
    description:
      - Number of GPUs, 1 up to the catalog's ceiling for the GPU type and cloud. Fixed at create.
      - Defaults to 1 when a GPU pod is created.
    type: int
  cpu_flavor:
    description:
      - CPU flavor id for a CPU-only pod, instead of O(gpu_type). Fixed at create.
    type: str
  vcpu_count:
    description:
      - Number of vCPUs of a CPU pod, a power of two within the flavor's range. Required with O(cpu_flavor);
        an error with O(gpu_type).
    type: int
  cloud:
    description:
      - Cloud tier. RunPod uses V(SECURE) when it is not set. Fixed at create.
    type: str
    choices: [SECURE, COMMUNITY]
  data_center_ids:
    description:
      - Data centers the pod may be placed in, in order of preference. Empty lets RunPod choose.
      - With O(network_volume_id) and no data centers given, the pod is placed in the volume's data
        center, the only one the volume attaches in.
      - For an existing pod, a pod placed outside this list is an error (placement is fixed at create).
    type: list
    elements: str
  allowed_cuda_versions:
    description:
      - Acceptable CUDA versions of the host, as C(major.minor). Mutually exclusive with O(min_cuda_version).
    type: list
    elements: str
  min_cuda_version:
    description:
      - Lowest acceptable CUDA version of the host, as C(major.minor).
    type: str
  container_disk:
    description:
      - Container disk in GB. Ephemeral; wiped on every stop and restart.
    type: int
  persistent_volume_size:
    description:
      - Size in GB (at least 10) of a persistent volume on the pod's host. It survives stop and dies with
        the pod. Mutually exclusive with O(network_volume_id) (a pod mounts one or the other); a task that
        sets both fails before any API call, in check mode too. Fixed at create.
    type: int
  persistent_volume_path:
    description:
      - Mount path of the persistent volume. Fixed at create; with O(persistent_volume_size) set, another path
        on an existing pod is an error.
    type: str
    default: /workspace
  network_volume_id:
    description:
      - Id of a network volume to mount. It must live in one of O(data_center_ids). Fixed at create.
      - Mutually exclusive with O(persistent_volume_size).
    type: str
  network_volume_path:
    description:
      - Mount path of the network volume. Fixed at create; with O(network_volume_id) set, another path on an
        existing pod is an error.
    type: str
    default: /workspace
  ports:
    description:
      - Exposed ports as C(port/protocol), the protocol V(tcp), V(udp) or V(http). V(22/tcp) gives the pod a
        direct SSH endpoint.
      - Defaults to V(22/tcp) when a pod is created.
    type: list
    elements: str
  env:
    description:
      - Environment variables of the container. Keys not listed here are kept.
      - Names are C([A-Za-z_][A-Za-z0-9_]*); values must not hold NUL. C(TRAINOPS_CREATE_TOKEN) is reserved.
      - Visible to the container's entry point only, not in SSH sessions.
      - Values are shown in logs; put secrets in O(secret_env).
    type: dict
  secret_env:
    description:
      - Environment variables whose values are secrets. Merged into O(env); never logged.
      - The values reach the pod's environment, so prefer keys scoped to the pod.
    type: dict
  start_ssh:
    description:
      - Create the pod with the account's registered SSH keys (see M(trainops.gpu.runpod_ssh_key)).
    type: bool
    default: true
  wait:
    description:
      - Wait for the state to be reached (see O(state)). Bounded by O(wait_timeout).
      - When the wait times out the module fails and reports the pod's id and last known state, so a pod it
        created is never left billing unseen.
    type: bool
    default: true
  wait_timeout:
    description:
      - How long to wait, in seconds, from 1 to 21600 (6 hours); checked before anything is created.
    type: int
    default: 600
  wait_for:
    description:
      - With O(wait), what V(present), V(running) and V(restarted) wait for.
      - V(ssh) (the default) waits until the pod is C(RUNNING), publishes a direct SSH endpoint and that endpoint
        answers with an SSH banner, the point at which Ansible can reach the pod.
      - V(endpoint) waits until the pod is C(RUNNING) and publishes its direct SSH endpoint, without connecting to it.
      - V(running) waits for status C(RUNNING) only, for images without sshd. C(RUNNING) alone is not ready for SSH.
      - Pods without V(22/tcp) in their ports never get an endpoint; for them every choice means V(running).
      - A pod that runs on a host without a public IP (some COMMUNITY hosts) never gets a direct endpoint; once
        C(runtime.ports) shows 22/tcp with no public mapping (or no 22/tcp at all) on two more polls, the wait
        for V(ssh) or V(endpoint) fails at once, not at O(wait_timeout), naming the cause (C(ssh_unreachable) is
        V(no_public_ip) or V(no_ssh_port) in the failure) - create the pod with O(cloud=SECURE) or elsewhere.
      - A pod gets SSH access from the account's registered keys (O(start_ssh)) or a C(PUBLIC_KEY) in O(env);
        creating a pod with neither while waiting for V(ssh) or V(endpoint) fails before the pod is created.
    type: str
    choices: [ssh, endpoint, running]
    default: ssh
  record_to:
    description:
      - Path of the run's state file (C(runs/<run_id>/state.json), see M(trainops.gpu.run_state)) to record the pod
        in. A pod this task creates is recorded (C(kind=pod), its id, name, C(action=created), status) the moment
        the create call returns, before any wait. SIGINT and SIGTERM are held off from the create call until the
        create is settled and recorded, and take effect right after (after a create that failed ambiguously this
        includes the lookups of O(reconcile_window)). Pods a failed create left behind (found by its create
        token) are recorded too.
      - When the module returns (or fails) the pod's last status is recorded; an existing pod it manages is
        recorded with C(action=reused) unless the file already has it (a C(created) pod stays C(created)).
      - With V(absent), the state read back from the API after the terminate is recorded as
        C(final) (C(status), C(read_at), C(source=api)); a pod already gone is updated only when the file has it.
      - The file is checked before anything is created (format, run, writable directory). Check mode writes nothing.
  record_fields:
    description:
      - More fields for the pod's record, for example V(role=trainer). Secret-looking keys are refused.
seealso:
  - module: trainops.gpu.runpod_pod_info
  - module: trainops.gpu.runpod_ssh_key
  - module: trainops.gpu.runpod_catalog_info
  - module: trainops.gpu.run_state
"""

EXAMPLES = r"""
- name: Create a training pod and wait until SSH answers
  trainops.gpu.runpod_pod:
    name: trainops-run42-trainer
    image: runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404
    gpu_type: NVIDIA GeForce RTX 4090
    gpu_count: 1
    data_center_ids: [EU-RO-1]
    network_volume_id: "{{ volume.network_volume.id }}"
    env:
      RUN_ID: run42
    secret_env:
      HF_TOKEN: "{{ vault_hf_token }}"
    wait_timeout: 900
  register: trainer

- name: Create a pod and record it in the run's state file before waiting for it
  trainops.gpu.runpod_pod:
    name: trainops-run42-drill
    image: runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404
    gpu_type: NVIDIA GeForce RTX 4090
    persistent_volume_size: 20
    record_to: "{{ playbook_dir }}/../runs/run42/state.json"
    record_fields:
      role: drill

- name: Connect to it
  ansible.builtin.debug:
    msg: "ssh -p {{ trainer.pod.ssh_port }} {{ trainer.pod.ssh_user }}@{{ trainer.pod.ssh_host }}"

- name: Stop it (storage keeps billing)
  trainops.gpu.runpod_pod:
    id: "{{ trainer.pod.id }}"
    state: stopped

- name: Start it again; the SSH port changes on every start
  trainops.gpu.runpod_pod:
    id: "{{ trainer.pod.id }}"
    state: running

- name: Set the API key once for every RunPod module
  module_defaults:
    group/trainops.gpu.runpod:
      api_key: "{{ vault_runpod_api_key }}"
  block:
    - name: Terminate the pod
      trainops.gpu.runpod_pod:
        name: trainops-run42-trainer
        state: absent
"""

RETURN = r"""
pod:
  description:
    - The pod as last read from the API. Empty when the pod would be created in check mode, or never existed.
    - Environment variable values are not returned, only their names.
  returned: always
  type: dict
  contains:
    id:
      description: Pod id.
      type: str
      sample: pod_abc123
    name:
      description: Pod name.
      type: str
      sample: trainops-run42-trainer
    status:
      description: C(PROVISIONING), C(STARTING), C(RUNNING), C(EXITED), C(ERROR) or C(TERMINATED).
      type: str
      sample: RUNNING
    actions:
      description: Actions RunPod allows in the current status.
      type: list
      elements: str
      sample: [stop, restart, terminate]
    image:
      description: Container image.
      type: str
    gpu_type:
      description: GPU type id; null for a CPU pod.
      type: str
    gpu_count:
      description: Number of GPUs; null for a CPU pod.
      type: int
    cpu_flavor:
      description: CPU flavor id of a CPU pod.
      type: str
    vcpu_count:
      description: vCPUs of a CPU pod.
      type: int
    cloud:
      description: Cloud tier.
      type: str
    data_center_id:
      description: Data center the pod was placed in.
      type: str
    cuda_version:
      description: CUDA version of the host, when known.
      type: str
    container_disk:
      description: Container disk in GB.
      type: int
    ports:
      description: Exposed ports.
      type: list
      elements: str
    env_keys:
      description: Names of the container's environment variables.
      type: list
      elements: str
    persistent_volume:
      description: Persistent volume (C(size), C(path)), or null.
      type: dict
    network_volume:
      description: Mounted network volume (C(id), C(path)), or null.
      type: dict
    ssh_host:
      description: Host of the direct SSH endpoint; null while the pod has none (provisioning, stopped).
      type: str
      sample: 127.0.0.1
    ssh_port:
      description: Port of the direct SSH endpoint. Changes on every start.
      type: int
      sample: 43122
    ssh_user:
      description: SSH user of the direct endpoint.
      type: str
      sample: root
    ssh_command:
      description: Ready-to-run ssh command line for the direct endpoint.
      type: str
    cost_per_hr:
      description: Current cost in USD per hour.
      type: float
    locked:
      description: Whether the pod is locked against stop and reset.
      type: bool
    created_at:
      description: Creation time (RFC 3339).
      type: str
    started_at:
      description: Last start time (RFC 3339), or null.
      type: str
created:
  description: Whether this run created the pod.
  returned: always
  type: bool
reconciled:
  description:
    - True when a create request failed without a usable answer and the pod it had created was found by its
      create token (or name).
  returned: always
  type: bool
"""

from ansible_collections.trainops.gpu.plugins.module_utils._run_state import (
    RECORD_ARGUMENT_SPEC,
    ResourceRecording,
    final_block,
    signals_held,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod import (
    ERROR,
    EXITED,
    MAX_WAIT_TIMEOUT,
    POD_COMING_UP,
    POD_STOPPED,
    RUNNING,
    TERMINATED,
    RunPodSshUnreachable,
    RunPodUnreconciled,
    RunPodWaitTimeout,
    pod_status,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import (
    RunPodModule,
    creating_argument_spec,
    new_create_token,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import (
    CREATE_TOKEN_ENV,
    pod_summary,
    pods_of_create,
    select_pods,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_validate import (
    env_problems,
    integer_problems,
    mount_path_problems,
    port_problems,
    validate_pod_body,
    volume_choice_problems,
)

# Options that only one kind of pod takes: given for the other kind, RunPod would ignore them.
GPU_ONLY = ("gpu_count", "allowed_cuda_versions", "min_cuda_version", "persistent_volume_size")
CPU_ONLY = ("vcpu_count",)


def option_problems(params, env) -> list:
    """Problems with the options alone, before any API call: types, formats, options the pod kind ignores."""
    p = params
    problems = integer_problems(
        dict((k, p[k]) for k in ("gpu_count", "vcpu_count", "container_disk", "persistent_volume_size", "wait_timeout"))
    )
    if p["gpu_type"]:
        problems += [
            "%s applies to CPU pods (cpu_flavor) only, not to a GPU pod (gpu_type)" % k for k in CPU_ONLY if p[k]
        ]
    if p["cpu_flavor"]:
        problems += [
            "%s applies to GPU pods (gpu_type) only, not to a CPU pod (cpu_flavor)" % k
            for k in GPU_ONLY
            if p[k] not in (None, [])
        ]
    problems += port_problems(p["ports"]) + env_problems(env)
    problems += volume_choice_problems(p["persistent_volume_size"], p["network_volume_id"])
    problems += mount_path_problems("persistent_volume_path", p["persistent_volume_path"])
    problems += mount_path_problems("network_volume_path", p["network_volume_path"])
    if p["name"] is not None and not p["name"]:
        problems.append("name must not be empty")
    if not isinstance(p["wait_timeout"], bool) and not 1 <= p["wait_timeout"] <= MAX_WAIT_TIMEOUT:
        problems.append(
            "wait_timeout must be from 1 to %d seconds (%d hours), got %s"
            % (MAX_WAIT_TIMEOUT, MAX_WAIT_TIMEOUT // 3600, p["wait_timeout"])
        )
    return problems


def action_took_effect(action, before, after) -> bool:
    """Whether a pod action that failed ambiguously happened anyway, judged from the pod read back."""
    if not after:
        return action == "terminate"
    status = after.get("status")
    if action == "start":
        return status not in POD_STOPPED
    if action == "stop":
        return status == EXITED
    if action == "restart":
        return status in POD_COMING_UP or after.get("startedAt") != (before or {}).get("startedAt")
    return status == TERMINATED


# The pod fields a record in state.json keeps (besides kind, id, action and the caller's record_fields).
RECORDED_FIELDS = ("name", "status", "image", "gpu_type", "gpu_count", "cpu_flavor", "data_center_id")


def record_fields(summary, action=None, final=None) -> dict:
    """The record of a pod (its pod_summary) for state.json: what identifies it and its status, no Nones."""
    fields = dict((k, summary.get(k)) for k in RECORDED_FIELDS if summary.get(k) is not None)
    network = summary.get("network_volume") or {}
    if network.get("id"):
        fields["network_volume_id"] = network["id"]
    if action:
        fields["action"] = action
    if final is not None:
        fields["final"] = final
    return fields


def comparable(pod) -> dict:
    """The fields a diff shows."""
    summary = pod_summary(pod)
    keys = (
        "id",
        "name",
        "status",
        "image",
        "gpu_type",
        "gpu_count",
        "cpu_flavor",
        "vcpu_count",
        "cloud",
        "data_center_id",
        "container_disk",
        "ports",
        "env_keys",
        "persistent_volume",
        "network_volume",
    )
    return dict((key, summary.get(key)) for key in keys) if summary else {}


class RunPodPod(ResourceRecording, RunPodModule):
    # record_to: what the state.json record of a pod holds and how messages name it.
    record_kind = "pod"
    record_result_key = "pod"
    record_noun = "pod"
    record_label_keys = ("name", "status")
    record_remedy = "terminate it"
    record_id_key = "pod_id"
    summarise = staticmethod(pod_summary)
    recorded_fields = staticmethod(record_fields)

    def __init__(self, module):
        super(RunPodPod, self).__init__(module)
        self.result.update(pod={}, created=False, reconciled=False)
        self.params = module.params
        self.start_recording(module)

    # -- finding -----------------------------------------------------------------------------

    def find(self):
        pod_id, name = self.params["id"], self.params["name"]
        if pod_id:
            pod = self.client.get_pod(pod_id)
            return None if not pod or pod.get("status") == TERMINATED else pod
        matches = select_pods(self.client.list_pods(), name=name)
        if len(matches) > 1:
            ids = sorted(p.get("id") for p in matches)
            self.fail(
                "%d pods are named %r (ids: %s); RunPod names are not unique, so give id to pick one"
                % (len(matches), name, ", ".join(ids)),
                pod_ids=ids,
            )
        return matches[0] if matches else None

    # -- create ------------------------------------------------------------------------------

    def desired_env(self):
        if self.params["env"] is None and self.params["secret_env"] is None:
            return None
        env = dict((str(k), str(v)) for k, v in (self.params["env"] or {}).items())
        env.update((str(k), str(v)) for k, v in (self.params["secret_env"] or {}).items())
        return env

    def create_body(self) -> dict:
        p = self.params
        body = {"name": p["name"], "image": p["image"]}
        if p["gpu_type"]:
            gpu = {"id": p["gpu_type"], "count": p["gpu_count"] if p["gpu_count"] is not None else 1}
            if p["allowed_cuda_versions"]:
                gpu["allowedCudaVersions"] = list(p["allowed_cuda_versions"])
            if p["min_cuda_version"]:
                gpu["minCudaVersion"] = p["min_cuda_version"]
            body["gpu"] = gpu
        if p["cpu_flavor"]:
            body["cpu"] = {"id": p["cpu_flavor"], "vcpuCount": p["vcpu_count"]}
        if p["cloud"]:
            body["cloud"] = p["cloud"]
        if p["data_center_ids"]:
            body["dataCenterIds"] = list(p["data_center_ids"])
        if p["container_disk"] is not None:
            body["disk"] = p["container_disk"]
        mounts = {}
        if p["persistent_volume_size"] is not None:
            mounts["persistent"] = {"size": p["persistent_volume_size"], "path": p["persistent_volume_path"]}
        if p["network_volume_id"]:
            mounts["network"] = [{"volumeId": p["network_volume_id"], "path": p["network_volume_path"]}]
        if mounts:
            # Both kinds stay in the body (option_problems refuses that first): validate_pod_body names it.
            body["mounts"] = mounts
        body["ports"] = list(p["ports"]) if p["ports"] is not None else ["22/tcp"]
        env = self.desired_env()
        if env:
            body["env"] = env
        body["startSsh"] = p["start_ssh"]
        return body

    def validate(self, body):
        """Check the body against the catalog; fail naming every problem before anything is created."""
        p = self.params
        missing = [opt for opt in ("name", "image") if not p[opt]]
        if not p["gpu_type"] and not p["cpu_flavor"]:
            missing.append("gpu_type or cpu_flavor")
        if missing:
            self.fail("cannot create a pod without %s" % ", ".join(missing))
        gpu_types = self.client.list_gpu_types(availability=True) if body.get("gpu") else []
        cpu_types = self.list_cpu_types() if body.get("cpu") else None
        volume = None
        if p["network_volume_id"]:
            volume = self.client.get_network_volume(p["network_volume_id"])
            if volume and not body.get("dataCenterIds"):
                # A network volume attaches only in its own data center: place the pod there.
                body["dataCenterIds"] = [volume.get("dataCenter")]
        data_centers = self.client.list_data_centers() if body.get("dataCenterIds") else []
        volume_missing = bool(p["network_volume_id"]) and volume is None
        if volume_missing and self.module.check_mode:
            # In check mode an earlier task may only have pretended to create the volume.
            self.module.warn(
                "network volume %s does not exist (yet); check mode cannot validate it" % p["network_volume_id"]
            )
            body["mounts"] = {}
            volume_missing = False
        problems = validate_pod_body(
            body,
            gpu_types,
            data_centers,
            network_volume=volume,
            network_volume_missing=volume_missing,
            cpu_types=cpu_types,
        )
        problems += self.ssh_access_problems(body)
        if problems:
            self.fail(
                "cannot create pod %r: %s. Nothing was created." % (p["name"], "; ".join(problems)), problems=problems
            )

    def list_cpu_types(self) -> list:
        return (self.client.request("listCpuTypes", "GET", "/v2/catalog/cpus") or {}).get("cpus") or []

    def ssh_access_problems(self, body) -> list:
        """Why a wait for SSH on the pod ``body`` creates could never finish (no keys, no PUBLIC_KEY)."""
        p = self.params
        if not p["wait"] or p["wait_for"] == "running" or "22/tcp" not in body.get("ports", []):
            return []
        if "PUBLIC_KEY" in (body.get("env") or {}):
            return []
        hint = (
            "so the pod would have no SSH access and wait_for=%s could never finish: register a key with "
            "trainops.gpu.runpod_ssh_key, set PUBLIC_KEY in env, or use wait_for: running" % p["wait_for"]
        )
        if not p["start_ssh"]:
            return ["start_ssh is false and env sets no PUBLIC_KEY, " + hint]
        if self.client.get_ssh_keys():
            return []
        if self.module.check_mode:
            # In check mode an earlier task may only have pretended to register a key.
            self.module.warn("the account has no registered SSH keys (yet); without one the real run fails")
            return []
        return ["the account has no registered SSH keys, " + hint]

    def create(self):
        body = self.create_body()
        self.validate(body)
        # The client token travels with the pod (RunPod keeps env), so a create is never re-sent on a guess.
        token = new_create_token()
        body["env"] = dict(body.get("env") or {}, **{CREATE_TOKEN_ENV: token})
        self.mark_changed()
        if self.module._diff:
            after = dict(
                name=body["name"],
                image=body["image"],
                status=RUNNING,
                ports=body["ports"],
                env_keys=sorted(k for k in body["env"] if k != CREATE_TOKEN_ENV),
            )
            self.result["diff"] = {"before": {}, "after": after}
        if self.module.check_mode:
            self.result["created"] = True
            return None
        if not self.recorder.enabled:
            pod, self.result["reconciled"] = self.create_reconciled(
                "pod",
                body["name"],
                lambda: self.client.create_pod(body),
                lambda: pods_of_create(self.client.list_pods(), body["name"], token),
                "pod_ids",
            )
        else:
            # From the create call to its record, an interrupt would leave a billing pod no file knows.
            with signals_held():
                pod, self.result["reconciled"] = self.create_reconciled(
                    "pod",
                    body["name"],
                    lambda: self.created(self.client.create_pod(body)),
                    # Only the pods that carry the token: one that only has the name may be anyone's, and
                    # state.json is what the audit trusts to tell the runs' pods from orphans.
                    lambda: self.record_found(
                        pods_of_create(self.client.list_pods(), body["name"], token),
                        lambda pod: (pod.get("env") or {}).get(CREATE_TOKEN_ENV) == token,
                    ),
                    "pod_ids",
                )
        self.result["created"] = True
        self.result["pod"] = pod_summary(pod)
        return pod

    # -- update ------------------------------------------------------------------------------

    def check_immutable(self, pod):
        p = self.params
        gpu = pod.get("gpu") or {}
        cpu = pod.get("cpu") or {}
        network = ((pod.get("mounts") or {}).get("network") or [{}])[0]
        persistent = (pod.get("mounts") or {}).get("persistent") or {}
        checks = [
            ("gpu_type", p["gpu_type"], gpu.get("id")),
            ("gpu_count", p["gpu_count"], gpu.get("count")),
            ("cpu_flavor", p["cpu_flavor"], cpu.get("id")),
            ("vcpu_count", p["vcpu_count"], cpu.get("vcpuCount")),
            ("cloud", p["cloud"], pod.get("cloud")),
            ("network_volume_id", p["network_volume_id"], network.get("volumeId")),
            ("persistent_volume_size", p["persistent_volume_size"], persistent.get("size")),
        ]
        # The paths have defaults, so they count only where the playbook asks for that volume.
        if p["network_volume_id"] is not None:
            checks.append(("network_volume_path", p["network_volume_path"], network.get("path")))
        if p["persistent_volume_size"] is not None:
            checks.append(("persistent_volume_path", p["persistent_volume_path"], persistent.get("path")))
        problems = [
            "%s is %r, not %r" % (opt, have, want) for opt, want, have in checks if want is not None and want != have
        ]
        placed = pod.get("dataCenterId")
        if p["data_center_ids"] and placed and placed not in p["data_center_ids"]:
            problems.append(
                "the pod runs in data center %s, outside data_center_ids %s" % (placed, ", ".join(p["data_center_ids"]))
            )
        if problems:
            self.fail(
                "pod %s (%s) cannot be changed in place: %s. These are fixed at create; terminate the pod "
                "and create it again to change them." % (pod.get("id"), pod.get("name"), "; ".join(problems)),
                pod=pod_summary(pod),
            )

    def check_name_free(self, pod, name):
        """A rename to a name another live pod has would make finding either by name fail: refuse it."""
        others = sorted(
            o.get("id") for o in select_pods(self.client.list_pods(), name=name) if o.get("id") != pod["id"]
        )
        if others:
            self.fail(
                "cannot rename pod %s to %r: live pod(s) %s already have that name, and this module finds pods by "
                "name. Nothing was changed." % (pod["id"], name, ", ".join(others)),
                pod=pod_summary(pod),
                pod_ids=others,
            )

    def update(self, pod):
        self.check_immutable(pod)
        p = self.params
        patch = {}
        if p["id"] and p["name"] and p["name"] != pod.get("name"):
            self.check_name_free(pod, p["name"])
            patch["name"] = p["name"]
        if p["image"] and p["image"] != pod.get("image"):
            patch["image"] = p["image"]
        if p["container_disk"] is not None and p["container_disk"] != pod.get("disk"):
            patch["disk"] = p["container_disk"]
        if p["ports"] is not None and sorted(p["ports"]) != sorted(pod.get("ports") or []):
            patch["ports"] = list(p["ports"])
        wanted_env = self.desired_env()
        current_env = dict(pod.get("env") or {})
        if wanted_env is not None and any(current_env.get(k) != v for k, v in wanted_env.items()):
            merged = dict(current_env)
            merged.update(wanted_env)
            patch["env"] = merged
        if not patch:
            return pod
        self.mark_changed()
        if self.module._diff:
            before = comparable(pod)
            after = dict(before)
            after.update(dict((k, v) for k, v in patch.items() if k != "env"))
            if "disk" in patch:
                after["container_disk"] = after.pop("disk")
            if "env" in patch:
                after["env_keys"] = sorted(patch["env"].keys())
            self.result["diff"] = {"before": before, "after": after}
        if self.module.check_mode:
            return pod
        return self.client.update_pod(pod["id"], patch) or self.client.get_pod(pod["id"])

    # -- run state ---------------------------------------------------------------------------

    def act(self, pod, action):
        """Send a pod action; a failure without a clear answer is judged by reading the pod back."""
        try:
            return self.client.reconcile(
                lambda: self.client.pod_action(pod["id"], action) or self.client.get_pod(pod["id"]),
                lambda: self.client.get_pod(pod["id"]),
                lambda after: action_took_effect(action, pod, after),
                read_back_on=(409,),
            )[0]
        except RunPodUnreconciled as exc:
            if exc.read_error is not None:
                raise exc.read_error from None
            after, failure = exc.state, exc.failure
            if failure.status == 409:
                allowed = ", ".join((after or {}).get("actions") or []) or "none"
                self.fail_api(
                    failure,
                    context="cannot %s pod %s in status %s (allowed now: %s)"
                    % (action, pod["id"], (after or {}).get("status"), allowed),
                    pod=pod_summary(after),
                )
            self.fail_api(failure, context="%s pod %s" % (action, pod["id"]), pod=pod_summary(after))

    def transition(self, pod, action, new_status):
        self.mark_changed()
        if self.module._diff:
            before = comparable(pod)
            self.result["diff"] = {"before": before, "after": dict(before, status=new_status)}
        if self.module.check_mode:
            return pod
        return self.act(pod, action)

    def ensure_state(self, pod, state):
        status = pod.get("status")
        if state == "running" and status in POD_STOPPED:
            return self.transition(pod, "start", RUNNING)
        if state == "stopped":
            if status == ERROR:
                self.module.warn("pod %s is in ERROR; it is not running, so it is left as it is" % pod["id"])
            elif status != EXITED:
                return self.transition(pod, "stop", EXITED)
        if state == "restarted":
            if status == RUNNING:
                return self.transition(pod, "restart", RUNNING)
            if status in POD_STOPPED:
                return self.transition(pod, "start", RUNNING)
            self.module.warn("pod %s is %s: it is already starting, so it was not restarted" % (pod["id"], status))
        return pod

    # -- waits -------------------------------------------------------------------------------

    def wait_ready(self, pod, state):
        """Wait for the state's goal; on timeout fail with the pod's id and last known state."""
        if self.module.check_mode or not self.params["wait"] or not pod:
            return pod
        timeout = self.params["wait_timeout"]
        try:
            if state == "stopped":
                return self.client.wait_for_pod(pod["id"], POD_STOPPED, timeout)
            if state == "present" and pod.get("status") in POD_STOPPED:
                # present keeps a stopped pod stopped: there is nothing to wait for.
                return pod
            ports = pod.get("ports") or []
            if self.params["wait_for"] != "running" and "22/tcp" in ports:
                return self.client.wait_for_ssh(pod["id"], timeout, probe=self.params["wait_for"] == "ssh")
            return self.client.wait_for_pod(pod["id"], (RUNNING,), timeout)
        except RunPodWaitTimeout as exc:
            last = exc.resource or pod
            created = " It was created by this task and is billing;" if self.result["created"] else ""
            self.fail(
                "%s.%s%s pod id %s: terminate it with state=absent or wait again."
                % (exc, self.ssh_cause(exc, last), created, pod["id"]),
                pod=pod_summary(last),
                pod_id=pod["id"],
            )
        except RunPodSshUnreachable as exc:
            # Waiting longer cannot help: fail now, naming the cause.
            created = " It was created by this task and is billing;" if self.result["created"] else ""
            self.fail(
                "%s.%s pod id %s: terminate it with state=absent." % (exc, created, pod["id"]),
                pod=pod_summary(exc.resource or pod),
                pod_id=pod["id"],
                ssh_unreachable=exc.cause,
            )

    def ssh_cause(self, exc, pod) -> str:
        """The real reason a pod never got an SSH endpoint, when it is a missing key."""
        if "ssh.direct endpoint" not in str(exc) or "PUBLIC_KEY" in ((pod or {}).get("env") or {}):
            return ""
        try:
            keys = self.client.get_ssh_keys()
        except Exception:  # pylint: disable=broad-except
            return ""
        if keys:
            return ""
        return (
            " The account has no registered SSH keys, so the pod has no SSH access: register one with "
            "trainops.gpu.runpod_ssh_key (it reaches pods created after it) or use wait_for: running."
        )

    def wait_gone(self, pod_id):
        if self.module.check_mode or not self.params["wait"]:
            return None
        try:
            return self.client.wait_for_pod(pod_id, (TERMINATED,), self.params["wait_timeout"], fail_statuses=())
        except RunPodWaitTimeout as exc:
            self.fail("%s: the terminate was sent, the pod still exists" % exc, pod=pod_summary(exc.resource))

    # -- main --------------------------------------------------------------------------------

    def run(self):
        state = self.params["state"]
        problems = option_problems(self.params, self.desired_env()) + self.recorder.option_problems()
        if problems:
            self.fail(
                "invalid options for pod %r: %s. Nothing was created or changed."
                % (self.params["name"] or self.params["id"], "; ".join(problems)),
                problems=problems,
            )
        pod = self.find()
        if state == "absent":
            self.terminate(pod)
            return
        if pod is None:
            if self.params["id"]:
                # Never create on a missing id: the caller meant an existing pod, and the name may be taken.
                self.fail(
                    "no pod with id %s exists; to create one give name only (RunPod assigns ids)" % self.params["id"]
                )
            if state in ("stopped", "restarted"):
                self.fail("state=%s needs an existing pod, and none named %r exists" % (state, self.params["name"]))
            pod = self.create()
        else:
            pod = self.update(pod)
            pod = self.ensure_state(pod, state)
        pod = self.wait_ready(pod, state)
        if pod:
            self.result["pod"] = pod_summary(pod)
            self.record(self.result["pod"], "created" if self.result["created"] else "reused")

    def terminate(self, pod):
        if pod is None:
            recorded = self.recorder.recorded(self.params["id"]) if self.params["id"] else None
            if recorded is not None and (recorded.get("final") or {}).get("status") != TERMINATED:
                # Gone already (404 or TERMINATED): the file learns it from the API.
                self.record({"id": self.params["id"], "status": TERMINATED}, final=final_block(TERMINATED))
            return
        self.mark_changed()
        if self.module._diff:
            self.result["diff"] = {"before": comparable(pod), "after": {}}
        self.result["pod"] = pod_summary(pod)
        if self.module.check_mode:
            return
        self.client.delete_pod(pod["id"])
        # Read the final state back, so the result says what RunPod says, not what we hoped.
        final = self.wait_gone(pod["id"])
        after = self.client.get_pod(pod["id"]) if final is None else final
        summary = pod_summary(after) if after else dict(self.result["pod"])
        summary["status"] = pod_status(after)
        if summary["status"] == TERMINATED:
            # A terminated pod has no endpoint and no cost, whatever the last read before it said.
            summary.update(ssh_host=None, ssh_port=None, ssh_user=None, ssh_command=None, cost_per_hr=0.0, actions=[])
        self.result["pod"] = summary
        self.record(summary, "reused", final=final_block(summary["status"]))


def main():
    module = RunPodPod.build_module(
        argument_spec=dict(
            creating_argument_spec(),
            id=dict(type="str"),
            name=dict(type="str"),
            state=dict(type="str", default="present", choices=["present", "running", "stopped", "restarted", "absent"]),
            image=dict(type="str"),
            gpu_type=dict(type="str"),
            gpu_count=dict(type="int"),
            cpu_flavor=dict(type="str"),
            vcpu_count=dict(type="int"),
            cloud=dict(type="str", choices=["SECURE", "COMMUNITY"]),
            data_center_ids=dict(type="list", elements="str"),
            allowed_cuda_versions=dict(type="list", elements="str"),
            min_cuda_version=dict(type="str"),
            container_disk=dict(type="int"),
            persistent_volume_size=dict(type="int"),
            persistent_volume_path=dict(type="str", default="/workspace"),
            network_volume_id=dict(type="str"),
            network_volume_path=dict(type="str", default="/workspace"),
            ports=dict(type="list", elements="str"),
            env=dict(type="dict"),
            secret_env=dict(type="dict", no_log=True),
            start_ssh=dict(type="bool", default=True),
            wait=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=600),
            wait_for=dict(type="str", default="ssh", choices=["ssh", "endpoint", "running"]),
            **RECORD_ARGUMENT_SPEC,
        ),
        required_one_of=[("id", "name")],
        mutually_exclusive=[
            ("gpu_type", "cpu_flavor"),
            ("allowed_cuda_versions", "min_cuda_version"),
        ],
        required_by={"cpu_flavor": "vcpu_count"},
        supports_check_mode=True,
    )
    RunPodPod(module).execute()


if __name__ == "__main__":
    main()
