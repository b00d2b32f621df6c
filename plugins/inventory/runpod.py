# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: runpod
short_description: RunPod pods as Ansible hosts, reached over their direct SSH endpoint
version_added: 0.1.0
description:
  - Reads the account's pods from the RunPod REST API v2 and adds every pod that has a direct SSH endpoint
    (C(ssh.direct)) as a host. C(ansible_host), C(ansible_port) and C(ansible_user) come from that endpoint,
    which RunPod assigns anew on every start, so run the inventory again after a stop and start.
  - Pods without an endpoint yet (provisioning, stopped, no C(22/tcp) port) are skipped, with a message at C(-v).
  - Host variables are the pod as M(trainops.gpu.runpod_pod) returns it in its C(pod) result (C(id), C(name), C(status),
    C(gpu_type), C(data_center_id), C(ssh_host), C(ssh_port), C(cost_per_hr), C(env_keys) and the rest), every key
    prefixed with C(runpod_) so that none collides with a reserved variable. Added to them are
    C(runpod_network_volume_id), and for pods named C(<prefix>-<run_id>-<role>) C(runpod_run_id) and C(runpod_role).
  - Groups, all prefixed C(runpod_) and made safe for Ansible (lowercase, C(_) for other characters), are
    C(runpod) (every pod), C(runpod_status_<status>), C(runpod_gpu_<gpu type>), C(runpod_dc_<data center>),
    and for pods named C(<prefix>-<run_id>-<role>) C(runpod_run_<run_id>) and C(runpod_role_<role>).
  - With O(cache) enabled the raw API answer is cached, never the built inventory; a run served from the
    cache makes no API call. Use C(--flush-cache) to read the API again. Environment variable values are
    blanked before caching (only their names are used), so secrets passed to pods never reach the cache.
    The cache entry is keyed by the configuration file, O(api_url) and a hash of O(api_key) (never the key
    itself), so another URL or account reads the API, never an earlier account's pods.
  - A failed API call (a wrong key, the API down) raises a parser error; with the collection's C(ansible.cfg)
    (C(any_unparsed_is_failed), no C(auto) plugin) C(ansible-inventory) and plays then fail, after one request.
  - Uses a configuration file whose name ends in C(runpod.yml) or C(runpod.yaml).
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: The name of this plugin; makes the configuration file its own.
    required: true
    type: str
    choices: [trainops.gpu.runpod]
  api_key:
    description:
      - RunPod API key. Templated, so a vaulted variable or C(lookup('ansible.builtin.env', ...)) works.
    type: str
    env:
      - name: RUNPOD_API_KEY
  api_url:
    description:
      - Base URL of the RunPod REST API (without C(/v2)). Point it at a local emulator to run without an account.
      - Templated. Plain C(http://) is accepted only for loopback hosts.
    type: str
    default: https://api.runpod.io
    env:
      - name: RUNPOD_API_URL
  api_timeout:
    description: Timeout in seconds for each HTTP request.
    type: int
    default: 30
  api_retries:
    description: Retries of a read on a rate limit, a gateway error or a connection failure.
    type: int
    default: 5
  validate_certs:
    description: Whether to validate the API server's TLS certificate.
    type: bool
    default: true
  statuses:
    description:
      - Only pods in these statuses become hosts. Only running pods have an SSH endpoint.
    type: list
    elements: str
    default: [RUNNING]
  name_prefix:
    description:
      - Only pods whose name starts with this, for example V(trainops-) for this collection's pods, or
        V(trainops-run42-) for one run. Unset, every pod of the account is a host.
    type: str
  run_name_prefix:
    description:
      - The C(<prefix>) of pod names C(<prefix>-<run_id>-<role>), from which the run and role groups are made.
    type: str
    default: trainops
  hostname:
    description:
      - What names a host. V(name) uses the pod name, or C(<name>_<id>) for pods that share a name; V(id) the pod id.
      - A name Ansible reserves (C(localhost), C(127.0.0.1), C(::1), C(all), C(ungrouped)), the name of a group
        (of this plugin, C(runpod) and C(runpod_*), or of an earlier inventory source) is never a host name;
        such a pod's host is C(<name>_<id>), with a message at C(-v). A pod named C(localhost) never takes
        over a play of C(localhost).
    type: str
    choices: [name, id]
    default: name
"""

EXAMPLES = r"""
# inventories/local.runpod.yml: the local emulator, its URL and key from the environment.
# For RunPod itself, drop api_url and set api_key: "{{ vault_runpod_api_key }}".
plugin: trainops.gpu.runpod
api_url: "{{ lookup('ansible.builtin.env', 'RUNPOD_API_URL', default='http://127.0.0.1:8765') }}"
api_key: "{{ lookup('ansible.builtin.env', 'RUNPOD_API_KEY') }}"
name_prefix: trainops-
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: .cache/runpod-inventory
cache_timeout: 60
keyed_groups:
  - key: runpod_cloud
    prefix: cloud
compose:
  ansible_python_interpreter: "'/usr/bin/python3'"
"""

import hashlib
import re

from ansible.errors import AnsibleParserError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import RunPodClient, RunPodError, check_api_url
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import (
    parse_pod_name,
    pod_summary,
    select_pods,
)


# Names Ansible gives a meaning of its own: a host named so would take over "hosts: localhost" or a group.
RESERVED_HOST_NAMES = frozenset(("localhost", "127.0.0.1", "::1", "all", "ungrouped"))
PLUGIN_GROUP = "runpod"


def is_reserved_host_name(name, group_names=()) -> bool:
    """True for Ansible's reserved names, this plugin's group names (runpod, runpod_*) and ``group_names``."""
    lowered = str(name).lower()
    return (
        lowered in RESERVED_HOST_NAMES
        or lowered == PLUGIN_GROUP
        or lowered.startswith(PLUGIN_GROUP + "_")
        or name in group_names
    )


def account_cache_suffix(api_url, api_key) -> str:
    """What makes a cache entry one account's: the URL (made file-name safe) and a hash, never the key itself."""
    digest = hashlib.sha256(("%s\n%s" % (api_url, api_key)).encode("utf-8")).hexdigest()[:24]
    return "%s_%s" % (re.sub(r"[^A-Za-z0-9]+", "_", str(api_url)).strip("_"), digest)


def safe_group_part(text) -> str:
    """Lowercase, with every run of characters other than letters, digits and _ made one _."""
    return re.sub(r"[^a-z0-9_]+", "_", str(text).lower()).strip("_")


def pod_hostvars(pod, run_name_prefix) -> dict:
    """The pod as the modules return it (runpod_pod's ``pod``), every key prefixed ``runpod_``.

    Added to it: ``runpod_network_volume_id`` and, for names ``<prefix>-<run_id>-<role>``, ``runpod_run_id``
    and ``runpod_role``. Environment variable values are left out, only their names are kept.
    """
    summary = pod_summary(pod)
    hostvars = dict(("runpod_" + key, value) for key, value in summary.items())
    parsed = parse_pod_name(summary.get("name"), run_name_prefix)
    hostvars.update(
        runpod_network_volume_id=(summary.get("network_volume") or {}).get("id"),
        runpod_run_id=parsed[0] if parsed else None,
        runpod_role=parsed[1] if parsed else None,
    )
    return hostvars


def pod_groups(pod, run_name_prefix) -> list:
    groups = ["runpod"]
    if pod.get("status"):
        groups.append("runpod_status_" + safe_group_part(pod["status"]))
    gpu_id = (pod.get("gpu") or {}).get("id")
    if gpu_id:
        groups.append("runpod_gpu_" + safe_group_part(gpu_id))
    if pod.get("dataCenterId"):
        groups.append("runpod_dc_" + safe_group_part(pod["dataCenterId"]))
    parsed = parse_pod_name(pod.get("name"), run_name_prefix)
    if parsed:
        groups.append("runpod_run_" + safe_group_part(parsed[0]))
        groups.append("runpod_role_" + safe_group_part(parsed[1]))
    return [g for g in groups if g and not g.endswith("_")]


def without_env_values(pods) -> list:
    """The pods with each environment value blanked: the names are all the inventory uses, and the values
    (tokens, passwords) must not reach the cache on disk."""
    return [dict(pod, env=dict.fromkeys(pod["env"], "")) if pod.get("env") else pod for pod in pods]


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "trainops.gpu.runpod"

    def verify_file(self, path):
        return super(InventoryModule, self).verify_file(path) and path.endswith(("runpod.yml", "runpod.yaml"))

    def _templated_option(self, name):
        # Templated so vaulted variables and env lookups work; templating a plain string returns it unchanged.
        value = self.get_option(name)
        return self.templar.template(value) if isinstance(value, str) else value

    def _account(self):
        """``(api_url, api_key)``, templated and checked: what the API call and the cache key both depend on."""
        api_key = self._templated_option("api_key")
        api_url = self._templated_option("api_url")
        if not api_key:
            raise AnsibleParserError(
                "trainops.gpu.runpod: no API key; set api_key or the RUNPOD_API_KEY environment variable"
            )
        try:
            check_api_url(api_url)
        except ValueError as exc:
            raise AnsibleParserError("trainops.gpu.runpod: %s" % to_native(exc)) from exc
        return to_native(api_url), to_native(api_key)

    def _fetch_pods(self, api_url, api_key) -> list:
        # A failure is an AnsibleParserError: with ansible.cfg's any_unparsed_is_failed, ansible-inventory and
        # every play fail on it instead of going on with no hosts.
        try:
            client = RunPodClient(
                api_key=api_key,
                api_url=api_url,
                timeout=self.get_option("api_timeout"),
                max_retries=self.get_option("api_retries"),
                validate_certs=self.get_option("validate_certs"),
            )
            pods = without_env_values(client.list_pods())
        except (ValueError, RunPodError) as exc:
            raise AnsibleParserError("trainops.gpu.runpod: %s" % to_native(exc)) from exc
        self.display.vvv(
            "trainops.gpu.runpod: %d pods from %s in %d HTTP requests" % (len(pods), api_url, client.http_attempts)
        )
        return pods

    def parse(self, inventory, loader, path, cache=True):
        super(InventoryModule, self).parse(inventory, loader, path, cache)
        self._read_config_data(path)
        api_url, api_key = self._account()
        # One entry per configuration file, API URL and key: another URL or account never reads this one's pods.
        cache_key = "%s_%s" % (self.get_cache_key(path), account_cache_suffix(api_url, api_key))
        use_cache = self.get_option("cache") and cache
        update_cache = self.get_option("cache") and not cache
        pods = None
        if use_cache:
            try:
                pods = self._cache[cache_key]
            except KeyError:
                update_cache = True
        if pods is None:
            pods = self._fetch_pods(api_url, api_key)
        if update_cache:
            # The API dicts (env values blanked), JSON-serialisable; the inventory is rebuilt from them on every run.
            self._cache[cache_key] = pods
        self._populate(pods)

    def _host_names(self, pods, selected) -> list:
        """``(pod, host name)`` of each of ``pods``: its name (or id), ``<name>_<id>`` when it is reserved or
        when ``selected`` pods share it."""
        run_prefix = self.get_option("run_name_prefix")
        taken = set(self.inventory.groups)
        for pod in pods:
            taken.update(pod_groups(pod, run_prefix))
        name_counts = {}
        for pod in selected:
            name_counts[pod.get("name")] = name_counts.get(pod.get("name"), 0) + 1
        names = []
        for pod in pods:
            host = pod.get("id") if self.get_option("hostname") == "id" else (pod.get("name") or pod.get("id"))
            if is_reserved_host_name(host, taken):
                # caplevel 0: shown from -v on.
                self.display.verbose(
                    "trainops.gpu.runpod: pod %s is named %r, a name Ansible or this plugin reserves (a group, "
                    "localhost, all): its host is %s_%s" % (pod.get("id"), host, host, pod.get("id")),
                    caplevel=0,
                )
                host = "%s_%s" % (host, pod.get("id"))
            elif host == pod.get("name") and name_counts[host] > 1:
                host = "%s_%s" % (host, pod.get("id"))
            names.append((pod, host))
        return names

    def _populate(self, pods):
        run_prefix = self.get_option("run_name_prefix")
        # An empty statuses keeps every pod, terminated ones too.
        selected = select_pods(
            pods,
            name_prefix=self.get_option("name_prefix"),
            statuses=self.get_option("statuses"),
            include_terminated=True,
        )
        reachable = []
        for pod in selected:
            if pod_summary(pod).get("ssh_host") is None:
                self.display.v(
                    "trainops.gpu.runpod: skipping pod %s (%s, %s): no direct SSH endpoint yet"
                    % (pod.get("id"), pod.get("name"), pod.get("status"))
                )
            else:
                reachable.append(pod)
        self.inventory.add_group(PLUGIN_GROUP)
        for pod, host in self._host_names(reachable, selected):
            self._add_pod(pod, host, run_prefix)

    def _add_pod(self, pod, host, run_prefix):
        strict = self.get_option("strict")
        hostvars = pod_hostvars(pod, run_prefix)
        for group in pod_groups(pod, run_prefix):
            self.inventory.add_group(group)
            self.inventory.add_host(host, group=group)
        self.inventory.set_variable(host, "ansible_host", hostvars["runpod_ssh_host"])
        self.inventory.set_variable(host, "ansible_port", hostvars["runpod_ssh_port"])
        self.inventory.set_variable(host, "ansible_user", hostvars["runpod_ssh_user"])
        for key, value in hostvars.items():
            self.inventory.set_variable(host, key, value)
        self._set_composite_vars(self.get_option("compose"), hostvars, host, strict=strict)
        self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host, strict=strict)
        self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, host, strict=strict)
