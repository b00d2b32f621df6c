#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runpod_network_volume
short_description: Create, grow and delete RunPod network volumes
version_added: 0.1.0
description:
  - Manages one RunPod network volume. A network volume survives pod termination, lives in one data
    center and attaches only to pods created in that data center.
  - A volume is found by O(id), or by exact O(name) (within O(data_center) when given). Names are not
    unique; several matches are an error that lists their ids.
  - Sizes only grow. A smaller O(size) than the volume has is reported as a warning and changes nothing.
  - The data center and the storage type are fixed at create; asking for other ones is an error.
  - RunPod keeps nothing but the name with a volume, so the name within its data center is the create's token;
    a create that fails without a usable answer is settled by looking the name up (for O(reconcile_window)
    seconds when no answer came at all), and after every create the module fails, listing the ids, when more
    than one volume of that name lives in the data center. Renaming to a name another volume there has is an
    error.
  - Deleting a volume attached to a live pod (running or stopped) is an error that names the pods, in check
    mode too.
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
      - Id of the volume. With O(name) as well, the volume is renamed.
      - Ids are assigned by RunPod, so a volume is never created for a missing id (that is an error); creating
        one needs O(name) without O(id).
    type: str
  name:
    description:
      - Name of the volume. Required to create one.
    type: str
  data_center:
    description:
      - Data center of the volume, for example V(EU-RO-1). Required to create one; fixed afterwards.
    type: str
  size:
    description:
      - Size in GB, 10 to 4096. Required to create a volume; an existing volume grows to it.
    type: int
  type:
    description:
      - Storage tier. When not set at create, the data center's default tier is used. Fixed afterwards.
    type: str
    choices: [STANDARD, HIGH_PERFORMANCE]
  state:
    description:
      - V(present) makes sure the volume exists with at least O(size) GB.
      - V(absent) deletes it, with all its data. A volume already gone is not an error.
    type: str
    choices: [present, absent]
    default: present
  record_to:
    description:
      - Path of the run's state file (C(runs/<run_id>/state.json), see M(trainops.gpu.run_state)) to record the
        volume in. A volume this task creates is recorded (C(kind=network_volume), its id, name, data center,
        size, C(action=created), C(status=available)) the moment the create call returns. SIGINT and SIGTERM are
        held off from the create call until the create is settled and recorded (after a create that failed
        ambiguously this includes the lookups of O(reconcile_window)). Volumes of the name found after a failed
        create are recorded too.
      - When the module returns, an existing volume it manages is recorded with C(action=reused) unless the file
        already has it (a C(created) volume stays C(created)).
      - With V(absent), the state read back from the API after the delete is recorded as C(final) (C(status)
        V(deleted) or V(available), C(read_at), C(source=api)); a volume already gone is updated only when the
        file has it.
      - The file is checked before anything is created. Check mode writes nothing.
  record_fields:
    description:
      - More fields for the volume's record, for example V(role=checkpoints). Secret-looking keys are refused.
seealso:
  - module: trainops.gpu.runpod_network_volume_info
  - module: trainops.gpu.runpod_pod
  - module: trainops.gpu.run_state
"""

EXAMPLES = r"""
- name: A volume for checkpoints next to the GPUs
  trainops.gpu.runpod_network_volume:
    name: trainops-run42-ckpt
    data_center: EU-RO-1
    size: 100
  register: volume

- name: A volume recorded in the run's state file the moment it is created
  trainops.gpu.runpod_network_volume:
    name: trainops-run42-ckpt
    data_center: EU-RO-1
    size: 100
    record_to: "{{ playbook_dir }}/../runs/run42/state.json"
    record_fields:
      role: checkpoints

- name: Grow it
  trainops.gpu.runpod_network_volume:
    id: "{{ volume.network_volume.id }}"
    size: 200

- name: Delete it (all data is lost)
  trainops.gpu.runpod_network_volume:
    id: "{{ volume.network_volume.id }}"
    state: absent
"""

RETURN = r"""
network_volume:
  description: The volume as last read from the API; empty when it would be created in check mode or never existed.
  returned: always
  type: dict
  contains:
    id:
      description: Volume id.
      type: str
      sample: agv6w2qcg7
    name:
      description: Volume name.
      type: str
      sample: trainops-run42-ckpt
    size:
      description: Size in GB.
      type: int
      sample: 100
    data_center:
      description: Data center the volume lives in.
      type: str
      sample: EU-RO-1
    type:
      description: Storage tier.
      type: str
      sample: STANDARD
created:
  description: Whether this run created the volume (in check mode, would create it).
  returned: always
  type: bool
reconciled:
  description:
    - True when a create request failed without a usable answer and the volume it had created was found by
      its name in the data center.
  returned: always
  type: bool
"""

from ansible_collections.trainops.gpu.plugins.module_utils._run_state import (
    RECORD_ARGUMENT_SPEC,
    ResourceRecording,
    final_block,
    signals_held,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import RunPodModule, creating_argument_spec
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import (
    pods_using_volume,
    volume_summary,
    volumes_named,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_validate import validate_volume_request


# A volume's status in state.json: the API has none, so it is "available" while it exists, "deleted" after.
AVAILABLE = "available"
DELETED = "deleted"
RECORDED_FIELDS = ("name", "data_center", "size", "type")


def record_fields(summary, action=None, final=None) -> dict:
    """The record of a volume (its volume_summary) for state.json; the data center as bench.yml named it."""
    fields = dict((k, summary.get(k)) for k in RECORDED_FIELDS if summary.get(k) is not None)
    if "data_center" in fields:
        fields["data_center_id"] = fields.pop("data_center")
    fields["status"] = AVAILABLE
    if action:
        fields["action"] = action
    if final is not None:
        fields.update(status=final["status"], final=final)
    return fields


class RunPodNetworkVolume(ResourceRecording, RunPodModule):
    # record_to: what the state.json record of a volume holds and how messages name it.
    record_kind = "network_volume"
    record_result_key = "network_volume"
    record_noun = "network volume"
    record_label_keys = ("name",)
    record_remedy = "delete it"
    summarise = staticmethod(volume_summary)
    recorded_fields = staticmethod(record_fields)

    def __init__(self, module):
        super(RunPodNetworkVolume, self).__init__(module)
        self.params = module.params
        self.result.update(network_volume={}, created=False, reconciled=False)
        self.start_recording(module)

    def find(self):
        p = self.params
        if p["id"]:
            return self.client.get_network_volume(p["id"])
        matches = volumes_named(self.client.list_network_volumes(), p["name"], p["data_center"])
        if len(matches) > 1:
            ids = sorted(v.get("id") for v in matches)
            self.fail(
                "%d network volumes are named %r (ids: %s); give id or data_center to pick one"
                % (len(matches), p["name"], ", ".join(ids)),
                network_volume_ids=ids,
            )
        return matches[0] if matches else None

    def create(self):
        p = self.params
        if p["id"]:
            # Never create on a missing id: the caller meant an existing volume (and its data).
            self.fail(
                "no network volume with id %s exists; to create one give name, data_center and size without id"
                % p["id"]
            )
        problems = validate_volume_request(p["size"], p["data_center"], p["type"], self.client.list_data_centers())
        if problems:
            self.fail(
                "cannot create network volume %r: %s. Nothing was created." % (p["name"], "; ".join(problems)),
                problems=problems,
            )
        body = {"name": p["name"], "size": p["size"], "dataCenter": p["data_center"]}
        if p["type"]:
            body["type"] = p["type"]
        self.mark_changed()
        if self.module._diff:
            self.result["diff"] = {"before": {}, "after": volume_summary(body) or dict(name=p["name"])}
            self.result["diff"]["after"].update(data_center=p["data_center"])
        if self.module.check_mode:
            self.result["created"] = True
            return None
        if not self.recorder.enabled:
            volume, self.result["reconciled"] = self.create_reconciled(
                "network volume",
                body["name"],
                lambda: self.client.create_network_volume(body),
                lambda: volumes_named(self.client.list_network_volumes(), body["name"], body["dataCenter"]),
                "network_volume_ids",
            )
        else:
            # From the create call to its record, an interrupt would leave a billing volume no file knows.
            with signals_held():
                volume, self.result["reconciled"] = self.create_reconciled(
                    "network volume",
                    body["name"],
                    lambda: self.created(self.client.create_network_volume(body)),
                    lambda: self.record_found(
                        volumes_named(self.client.list_network_volumes(), body["name"], body["dataCenter"])
                    ),
                    "network_volume_ids",
                )
        self.result["created"] = True
        return volume

    def update(self, volume):
        p = self.params
        problems = []
        if p["data_center"] and p["data_center"] != volume.get("dataCenter"):
            problems.append("data_center is %s, not %s" % (volume.get("dataCenter"), p["data_center"]))
        if p["type"] and p["type"] != volume.get("type"):
            problems.append("type is %s, not %s" % (volume.get("type"), p["type"]))
        if problems:
            self.fail(
                "network volume %s (%s) cannot be changed: %s. Both are fixed at create."
                % (volume.get("id"), volume.get("name"), "; ".join(problems)),
                network_volume=volume_summary(volume),
            )
        patch = {}
        current_size = volume.get("size") or 0
        if isinstance(p["size"], bool):
            self.fail("size must be an integer, got %s" % str(p["size"]).lower(), network_volume=volume_summary(volume))
        if p["size"] is not None:
            if p["size"] > 4096:
                self.fail("size %s GB is out of range: 10..4096" % p["size"], network_volume=volume_summary(volume))
            if p["size"] > current_size:
                patch["size"] = p["size"]
            elif p["size"] < current_size:
                self.module.warn(
                    "network volume %s has %s GB; it cannot shrink to %s GB, so it is left as it is"
                    % (volume.get("id"), current_size, p["size"])
                )
        if p["id"] and p["name"] and p["name"] != volume.get("name"):
            others = volumes_named(self.client.list_network_volumes(), p["name"], volume.get("dataCenter"))
            if others:
                self.fail(
                    "cannot rename network volume %s to %r: volume(s) %s in %s already have that name. Nothing was "
                    "changed."
                    % (
                        volume["id"],
                        p["name"],
                        ", ".join(sorted(v.get("id") for v in others)),
                        volume.get("dataCenter"),
                    ),
                    network_volume=volume_summary(volume),
                )
            patch["name"] = p["name"]
        if not patch:
            return volume
        self.mark_changed()
        if self.module._diff:
            before = volume_summary(volume)
            self.result["diff"] = {"before": before, "after": dict(before, **patch)}
        if self.module.check_mode:
            return volume
        return self.client.update_network_volume(volume["id"], patch) or self.client.get_network_volume(volume["id"])

    def check_detached(self, volume):
        """Deleting a volume a live pod mounts is refused by RunPod (409): say so before, in check mode too."""
        users = sorted(pod.get("id") for pod in pods_using_volume(self.client.list_pods(), volume["id"]))
        if users:
            self.fail(
                "network volume %s (%s) is attached to pod(s) %s; terminate them (state=absent) before deleting it. "
                "Nothing was deleted." % (volume["id"], volume.get("name"), ", ".join(users)),
                network_volume=volume_summary(volume),
                pod_ids=users,
            )

    def run(self):
        problems = self.recorder.option_problems()
        if problems:
            self.fail(
                "invalid options for network volume %r: %s. Nothing was created or changed."
                % (self.params["name"] or self.params["id"], "; ".join(problems)),
                problems=problems,
            )
        volume = self.find()
        if self.params["state"] == "absent":
            self.delete(volume)
            return
        volume = self.create() if volume is None else self.update(volume)
        if volume:
            self.result["network_volume"] = volume_summary(volume)
            self.record(self.result["network_volume"], "created" if self.result["created"] else "reused")

    def delete(self, volume):
        if volume is None:
            recorded = self.recorder.recorded(self.params["id"]) if self.params["id"] else None
            if recorded is not None and (recorded.get("final") or {}).get("status") != DELETED:
                self.record({"id": self.params["id"]}, final=final_block(DELETED))
            return
        self.check_detached(volume)
        self.mark_changed()
        self.result["network_volume"] = volume_summary(volume)
        if self.module._diff:
            self.result["diff"] = {"before": volume_summary(volume), "after": {}}
        if self.module.check_mode:
            return
        self.client.delete_network_volume(volume["id"])
        # Read it back, so the record says what RunPod says.
        after = self.client.get_network_volume(volume["id"])
        self.record(
            volume_summary(after) or self.result["network_volume"],
            "reused",
            final=final_block(AVAILABLE if after else DELETED),
        )


def main():
    module = RunPodNetworkVolume.build_module(
        argument_spec=dict(
            creating_argument_spec(),
            id=dict(type="str"),
            name=dict(type="str"),
            data_center=dict(type="str"),
            size=dict(type="int"),
            type=dict(type="str", choices=["STANDARD", "HIGH_PERFORMANCE"]),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            **RECORD_ARGUMENT_SPEC,
        ),
        required_one_of=[("id", "name")],
        supports_check_mode=True,
    )
    RunPodNetworkVolume(module).execute()


if __name__ == "__main__":
    main()
