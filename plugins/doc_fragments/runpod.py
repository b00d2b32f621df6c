# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    # Options every RunPod module shares. Set them once per play with
    # module_defaults: {group/trainops.gpu.runpod: {...}}.
    DOCUMENTATION = r"""
options:
  api_key:
    description:
      - RunPod API key, sent as a Bearer token.
      - If not set, the value of the E(RUNPOD_API_KEY) environment variable is used.
      - Never logged. Prefer a vaulted variable or the environment to a literal in a playbook.
    type: str
    required: true
  api_url:
    description:
      - Base URL of the RunPod REST API; request paths start with C(/v2/).
      - If not set, the value of the E(RUNPOD_API_URL) environment variable is used, else the default.
      - Point it at a local emulator, for example V(http://127.0.0.1:8765), to run without an account.
      - Plain C(http://) is accepted only for loopback hosts, so the key never crosses a network unencrypted.
    type: str
    default: https://api.runpod.io
  api_timeout:
    description:
      - Timeout in seconds for each HTTP request to the API.
    type: int
    default: 30
  api_retries:
    description:
      - How many times a request is retried on a rate limit (HTTP 429, honouring C(Retry-After)), a gateway
        error (HTTP 502, 503, 504) or a connection failure, with capped exponential backoff and jitter.
      - Only idempotent requests (reads, replacements, deletions) are retried on gateway and connection errors.
        A create that fails that way is reconciled by reading the resources back, never by sending it again blindly.
      - Authentication errors and other client errors are never retried.
    type: int
    default: 5
  validate_certs:
    description:
      - Whether to validate the API server's TLS certificate.
    type: bool
    default: true
notes:
  - The modules talk to the RunPod REST API v2 directly; no Python SDK is needed on the controller.
"""

    # Modules that create resources (runpod_pod, runpod_network_volume).
    CREATE = r"""
options:
  reconcile_window:
    description:
      - How long, in seconds, to look for the resource a create made when the create got no answer at all
        (it timed out or the connection dropped), since the server may still be making it. The create is sent again
        only when nothing carrying its create token has appeared by then.
      - Every create carries a token that travels with the resource (a pod's C(TRAINOPS_CREATE_TOKEN)
        environment variable; a network volume's name in its data center), and after every create the
        module reads it back and fails, listing the ids, when more than one resource carries it.
      - A create the server answered with an error (HTTP 5xx) is looked up twice, a second apart.
      - Defaults to O(api_timeout) + 10. At most 600.
    type: int
"""

    # Modules that record what they create in a run's state.json (runpod_pod, runpod_network_volume): the
    # options of RECORD_ARGUMENT_SPEC (module_utils/_run_state.py). Each module describes record_to and
    # record_fields for its own resource (what is recorded, when, and an example field); the module's
    # description is merged over this entry.
    RECORD = r"""
options:
  record_to:
    type: path
  record_run_id:
    description:
      - Run id of O(record_to). Defaults to the name of the file's directory.
    type: str
  record_fields:
    type: dict
"""

    # Shared by every RunPod module: membership of the trainops.gpu.runpod action group (meta/runtime.yml),
    # and the platform (the modules only speak HTTPS, so they run wherever Python does).
    ATTRIBUTES = r"""
attributes:
  action_group:
    description: Use C(group/trainops.gpu.runpod) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - trainops.gpu.runpod
  platform:
    support: full
    platforms: all
"""

    # The read-only *_info modules.
    ATTRIBUTES_INFO = r"""
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
"""
