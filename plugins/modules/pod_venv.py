#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pod_venv
short_description: A run's requirements in a venv on the pod's durable root, keyed by the file and the Python
version_added: 0.1.0
description:
  - Makes C(<root>/<key>/), a venv with C(--system-site-packages) (the image's torch, CUDA on RunPod, is seen
    and never replaced) holding what O(requirements) asks for; C(<key>) is a sha256 of the requirements' bytes
    and the pod Python's identity (implementation, version, machine, path).
  - A complete venv (its C(.trainops-venv.json) marker, written last) is reused as it is, after a pod
    stop/start or a recreate on the same network volume. A changed file gets a venv of its own.
  - Built in place under the key's lock (C(<root>/.<key>.lock)). A venv's scripts name their own path, so it is
    not built elsewhere and renamed. A directory without the marker (a build that was killed) is removed and
    built again, never used.
  - Before anything is installed, C(pip install --dry-run --report) says what would be; a requirement that would
    install torch, named in the file or pulled in by another, fails the module naming it and what asked for it.
  - pip runs as C(python -m pip) inside the venv, the system's pip (which the venv sees), else one from
    C(ensurepip)'s bundled wheel. Bounded by O(timeout); its cache is O(cache_dir).
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is built; RV(state) says V(reused) or V(would_build).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  requirements:
    description: The requirements file's content (pip's format; options such as C(--find-links) lines too).
    type: str
    required: true
  requirements_name:
    description: What to call the file in messages (its path in the source, say).
    type: str
    default: requirements.txt
  root:
    description: The directory that holds the venvs (the bootstrap role gives C(<durable>/cache/venvs)).
    type: path
    required: true
  python:
    description: The Python the venv is made from (its torch is the one the venv sees).
    type: str
    default: python3
  pip_args:
    description: Extra arguments for both pip runs (C([--no-index, --find-links, /workspace/wheels]), say).
    type: list
    elements: str
    default: []
  cache_dir:
    description: pip's cache (C(PIP_CACHE_DIR)); default pip's own.
    type: path
  timeout:
    description: Seconds the whole build may take (the dry run and the install); past it the build is killed.
    type: int
    default: 1800
"""

EXAMPLES = r"""
- name: The run's requirements, in a venv on the volume
  trainops.gpu.pod_venv:
    requirements: "{{ lookup('ansible.builtin.file', 'requirements.txt') }}"
    root: /workspace/cache/venvs
    cache_dir: /workspace/cache/pip
  register: venv
# venv.python: the interpreter to run the job with; venv.venv_dir its directory
"""

RETURN = r"""
state:
  description: V(reused) (complete already), V(built) (in this run) or V(would_build) (check mode).
  returned: always
  type: str
venv_dir:
  description: The venv's directory (not C(path), which Ansible would describe as a file).
  returned: always
  type: str
python:
  description: The venv's interpreter.
  returned: always
  type: str
key:
  description: The venv's key (its directory name).
  returned: always
  type: str
seconds:
  description: How long this run took to find or build it.
  returned: always
  type: float
freeze:
  description: C(pip freeze --local) inside the venv (what it holds beyond the image's packages); empty in check mode.
  returned: always
  type: list
  elements: str
installed:
  description: What the build's dry run said it would install (name==version); empty when reused.
  returned: always
  type: list
  elements: str
"""

import errno
import fcntl
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.gpu.plugins.module_utils._pod_venv import (
    MARKER_NAME,
    PIP_MIN,
    installed_in_report,
    pip_version,
    read_marker,
    refused_in_file,
    refused_in_report,
    unsupported_lines,
    venv_key,
)

KILL_GRACE_SECONDS = 5
# The Python and the torch the venv sees (a recreate on another image with another torch gets a venv of its own).
IDENTITY_SCRIPT = (
    "import platform, sys\n"
    "try:\n"
    "    from importlib.metadata import version\n"
    "    torch = version('torch')\n"
    "except Exception:\n"
    "    torch = 'none'\n"
    "print('%s %s %s %s torch %s' % (platform.python_implementation(), platform.python_version(),"
    " platform.machine(), sys.executable, torch))"
)


def run_bounded(module, argv, deadline, what, env=None):
    """(rc, stdout, stderr) of argv, killed by timeout(1) at the deadline; fails the module past it."""
    left = int(deadline - time.time())
    if left < 1:
        module.fail_json(msg="%s: timeout (%d s) passed" % (what, module.params["timeout"]))
    timeout_bin = module.get_bin_path("timeout", required=True)
    rc, out, err = module.run_command(
        [timeout_bin, "--kill-after=%d" % KILL_GRACE_SECONDS, str(left), *argv], environ_update=env or {}
    )
    if rc == 124 or (rc == 137 and time.time() >= deadline):
        module.fail_json(msg="%s: killed after the timeout (%d s)" % (what, module.params["timeout"]))
    return rc, out, err


def read_complete(path):
    """The marker's record of a complete venv at path, else None."""
    try:
        with open(os.path.join(path, MARKER_NAME)) as handle:
            record = read_marker(handle.read())
    except (IOError, OSError):
        return None
    if record is None or not os.access(os.path.join(path, "bin", "python"), os.X_OK):
        return None
    return record


def write_marker(path, record):
    temp = os.path.join(path, MARKER_NAME + ".tmp")
    with open(temp, "w") as handle:
        json.dump(record, handle, sort_keys=True, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.rename(temp, os.path.join(path, MARKER_NAME))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def build(module, path, requirements_file, deadline, result):
    params = module.params
    env = {"PIP_CACHE_DIR": params["cache_dir"]} if params["cache_dir"] else {}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    if os.path.lexists(path):
        shutil.rmtree(path)  # what a killed build left: never used
    rc, _out, err = run_bounded(
        module, [params["python"], "-m", "venv", "--system-site-packages", "--without-pip", path], deadline, "venv"
    )
    if rc != 0:
        module.fail_json(msg="python -m venv failed: %s" % err.strip()[-2000:], **result)
    python = os.path.join(path, "bin", "python")
    if run_bounded(module, [python, "-m", "pip", "--version"], deadline, "pip --version", env)[0] != 0:
        # the system has no pip for the venv to see: the venv's own, from ensurepip's bundled wheel (offline)
        rc, _out, err = run_bounded(module, [python, "-m", "ensurepip", "--default-pip"], deadline, "ensurepip", env)
        if rc != 0:
            module.fail_json(
                msg="the pod's Python has no pip and cannot make one (install python3-pip or python3-venv): %s"
                % err.strip()[-1000:],
                **result,
            )
    name = params["requirements_name"]
    rc, out, _err = run_bounded(module, [python, "-m", "pip", "--version"], deadline, "pip --version", env)
    found = pip_version(out)
    if found is None or found < PIP_MIN:
        module.fail_json(
            msg="pip %s on the pod is older than %d.%d, which the refusal of torch needs (--dry-run --report): "
            "upgrade the image's pip" % (out.strip()[:80] or "(none)", PIP_MIN[0], PIP_MIN[1]),
            **result,
        )
    pip = [python, "-m", "pip", "install", "-r", requirements_file, *params["pip_args"]]
    report_file = os.path.join(path, ".trainops-dry-run.json")
    dry_run = [*pip, "--dry-run", "--quiet", "--report", report_file]
    rc, _out, err = run_bounded(module, dry_run, deadline, "pip dry run", env)
    if rc != 0:
        module.fail_json(msg="pip cannot resolve %s: %s" % (name, err.strip()[-2000:]), **result)
    with open(report_file) as handle:
        report = json.load(handle)
    os.unlink(report_file)
    refused = refused_in_report(report)
    if refused:
        shutil.rmtree(path)
        module.fail_json(msg="%s refused before installing anything: %s" % (name, "; ".join(refused)), **result)
    result["installed"] = installed_in_report(report)
    rc, _out, err = run_bounded(module, pip, deadline, "pip install", env)
    if rc != 0:
        module.fail_json(msg="pip install -r %s failed: %s" % (name, err.strip()[-2000:]), **result)
    rc, out, err = run_bounded(module, [python, "-m", "pip", "freeze", "--local"], deadline, "pip freeze", env)
    if rc != 0:
        module.fail_json(msg="pip freeze failed: %s" % err.strip()[-2000:], **result)
    return [line for line in out.splitlines() if line.strip()]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            requirements=dict(type="str", required=True),
            requirements_name=dict(type="str", default="requirements.txt"),
            root=dict(type="path", required=True),
            python=dict(type="str", default="python3"),
            pip_args=dict(type="list", elements="str", default=[]),
            cache_dir=dict(type="path"),
            timeout=dict(type="int", default=1800),
        ),
        supports_check_mode=True,
    )
    params = module.params
    started = time.time()
    deadline = started + params["timeout"]
    name = params["requirements_name"]
    refused = refused_in_file(params["requirements"], name) + unsupported_lines(params["requirements"], name)
    if refused:
        module.fail_json(msg="%s refused before installing anything: %s" % (name, "; ".join(refused)))
    rc, identity, err = run_bounded(module, [params["python"], "-c", IDENTITY_SCRIPT], deadline, "python identity")
    if rc != 0:
        module.fail_json(msg="python %s does not run: %s" % (params["python"], err.strip()[-500:]))
    identity = identity.strip()
    content = params["requirements"].encode("utf-8")
    key = venv_key(content, identity, params["pip_args"])
    path = os.path.join(params["root"], key)
    result = dict(
        changed=False,
        state="reused",
        venv_dir=path,
        python=os.path.join(path, "bin", "python"),
        key=key,
        seconds=0.0,
        freeze=[],
        installed=[],
        identity=identity,
    )
    record = read_complete(path)
    if record is None and module.check_mode:
        result.update(state="would_build", changed=True, seconds=round(time.time() - started, 3))
        module.exit_json(**result)
    if record is None:
        os.makedirs(params["root"], exist_ok=True)
        lock_fd = os.open(os.path.join(params["root"], ".%s.lock" % key), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:  # another builder of the same key: wait for it, bounded
                try:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.time() > deadline:
                        module.fail_json(msg="venv %s is being built by another process past the timeout" % path)
                    time.sleep(1)
            record = read_complete(path)
            if record is None:
                with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as handle:
                    handle.write(content)
                try:
                    freeze = build(module, path, handle.name, deadline, result)
                except BaseException:
                    # a failed build leaves no directory behind (fail_json exits through here too)
                    if os.path.lexists(path) and read_complete(path) is None:
                        shutil.rmtree(path, ignore_errors=True)
                    raise
                finally:
                    os.unlink(handle.name)
                record = {
                    "key": key,
                    "identity": identity,
                    "requirements_name": params["requirements_name"],
                    "requirements_sha256": hashlib.sha256(content).hexdigest(),
                    "freeze": freeze,
                    "installed": result["installed"],
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "build_seconds": round(time.time() - started, 3),
                    "host": platform.node(),
                }
                write_marker(path, record)
                result.update(state="built", changed=True)
        finally:
            os.close(lock_fd)
    result.update(freeze=record["freeze"], seconds=round(time.time() - started, 3))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
