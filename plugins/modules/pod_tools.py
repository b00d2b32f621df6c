#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pod_tools
short_description: Make sure the programs the sync role and the job module run are on a pod
version_added: 0.1.0
description:
  - Looks on the target pod's PATH for C(rsync) (the sync role runs it on both ends), C(python3) (modules, the
    job module's supervisor, the trainer) and C(tmux) (the job module detaches with it, else with a new session
    by setsid(2); tmux is only required when setsid cannot be used).
  - A missing program is installed with apt - C(apt-get update) first only when apt knows no candidate for one
    of the packages (RunPod's images ship without apt lists), then
    C(apt-get install -y --no-install-recommends <packages>) - the whole bounded by O(install_timeout).
  - When a program is missing and cannot be installed (O(install_missing=false), no C(apt-get), not root, no
    apt source offers it, apt fails or runs past O(install_timeout)) the module fails, naming each missing
    program, what needs it and what to do.
  - Used by the C(trainops.gpu.bootstrap) role before anything is pushed to the pod.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is installed; RV(would_install) lists what would be, and the failures that need no
        apt run (install turned off, no apt-get, not root) happen as in a real run.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  install_missing:
    description:
      - Whether missing programs are installed with apt. V(false) fails instead, naming them.
    type: bool
    default: true
  install_timeout:
    description:
      - Seconds C(apt-get update) and C(apt-get install) may take together. Past it apt is stopped (SIGTERM, then
        SIGKILL) and the module fails.
    type: int
    default: 300
notes:
  - Installing needs root (RunPod's SSH user is root).
"""

EXAMPLES = r"""
- name: Programs sync and job need, installed when missing
  trainops.gpu.pod_tools:
    install_timeout: 300
  register: tools

- name: Refuse to install anything (fail naming what is missing)
  trainops.gpu.pod_tools:
    install_missing: false
"""

RETURN = r"""
found:
  description: Each program looked for, with its path after any install (null when absent).
  returned: always
  type: dict
  sample: {"python3": "/usr/bin/python3", "rsync": "/usr/bin/rsync", "tmux": null}
setsid:
  description: Whether a new session can be made with setsid(2) (the job module's fallback without tmux).
  returned: always
  type: bool
missing:
  description: The programs that were missing before any install (requirements not met).
  returned: always
  type: list
  elements: str
  sample: ["rsync"]
installed:
  description: The packages this run installed with apt (empty when nothing was missing, and in check mode).
  returned: always
  type: list
  elements: str
  sample: ["rsync"]
would_install:
  description: In check mode, the packages a real run would install; else empty.
  returned: always
  type: list
  elements: str
apt:
  description:
    - What apt did - C(update) (whether C(apt-get update) ran), C(commands) (each argv run), C(seconds) (for
      both together), C(output) (the end of apt's output when something was installed or failed).
  returned: always
  type: dict
"""

import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.gpu.plugins.module_utils._pod_tools import (
    APT_ENV,
    apt_errors,
    PROGRAMS,
    failure_message,
    install_command,
    packages_of,
    parse_candidates,
    refusal,
    run_bounded,
    setsid_works,
    tail,
    unmet,
    without_candidate,
)


def look(module):
    return dict((program, module.get_bin_path(program) or shutil.which(program)) for program in PROGRAMS)


def apt_install(module, packages, timeout, result):
    """Install packages with apt within timeout seconds: None when done, else why not (a sentence)."""
    apt = result["apt"]
    started = time.monotonic()
    deadline = started + timeout

    def run(argv):
        apt["commands"].append(argv)
        rc, output, timed_out = run_bounded(argv, deadline, env=APT_ENV)
        apt["seconds"] = round(time.monotonic() - started, 3)
        apt["output"] = tail(output, 2000)
        if timed_out:
            return (
                "%s did not finish within install_timeout %d s (the bootstrap role's bootstrap_install_timeout) and "
                "was stopped; the pod's dpkg may need `dpkg --configure -a`" % (" ".join(argv[:2]), timeout)
            )
        if rc != 0:
            return "%s exited %s: %s" % (" ".join(argv[:2]), rc, apt_errors(output))
        return None

    def candidates():
        rc, output, _timed_out = run_bounded(["apt-cache", "policy", *packages], deadline, env=APT_ENV)
        return parse_candidates(output if rc == 0 else "", packages)

    if without_candidate(candidates()):
        apt["update"] = True
        # An update that fails for one source (a stale mirror) may still have found the packages elsewhere.
        failed = run(["apt-get", "update"])
        lacking = without_candidate(candidates())
        if lacking:
            return "no apt source of the pod offers %s (%s)" % (
                ", ".join(lacking),
                failed or "after apt-get update: %s" % (tail(apt["output"], 400) or "no output"),
            )
    return run(install_command(packages, max(1, deadline - time.monotonic())))


def main():
    module = AnsibleModule(
        argument_spec={
            "install_missing": {"type": "bool", "default": True},
            "install_timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["install_timeout"] < 1:
        module.fail_json(msg="install_timeout must be >= 1 s, got %d" % params["install_timeout"])
    found = look(module)
    setsid = setsid_works()
    missing = unmet(found, setsid)
    packages = packages_of(missing)
    result = {
        "changed": False,
        "found": found,
        "setsid": setsid,
        "missing": [req["name"] for req in missing],
        "installed": [],
        "would_install": [],
        "apt": {"update": False, "commands": [], "seconds": 0.0, "output": ""},
    }
    if not missing:
        module.exit_json(**result)
    apt_get = module.get_bin_path("apt-get")
    refused = refusal(params["install_missing"], apt_get, os.geteuid() == 0)
    if refused:
        module.fail_json(msg=failure_message(missing, refused, params["install_missing"]), **result)
    if module.check_mode:
        result.update(changed=True, would_install=packages)
        module.exit_json(**result)
    failed = apt_install(module, packages, params["install_timeout"], result)
    result["found"] = look(module)
    still = unmet(result["found"], setsid)
    if failed or still:
        result["changed"] = bool(result["apt"]["commands"])
        reason = failed or "apt-get install ran, and it is still not on the PATH"
        module.fail_json(msg=failure_message(still or missing, reason), **result)
    result.update(changed=True, installed=packages)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
