#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pod_facts
short_description: Find out whether a pod is ready to train, and why not
version_added: 0.1.0
description:
  - Looks at the target pod the way a training job will need it, and compares what it finds with what was asked
    for. Changes nothing; the only write is a probe file in the durable root, written, fsynced and removed
    (skipped in check mode).
  - The durable root is a mount point (from C(/proc/self/mountinfo)) or only an existing directory; it must be
    writable. Free space on the container disk (C(/)) and on the durable root is compared with the minimums.
  - Accelerators come from C(nvidia-smi) (GPU count, names, driver version from C(--query-gpu), CUDA version
    from its header) and from torch (C(torch.cuda.is_available()), C(torch.cuda.device_count())), run in a
    separate Python process bounded by O(torch_timeout).
  - A pod asked to have GPUs on which C(nvidia-smi) finds none came back without its GPUs (RunPod may restart a
    stopped pod without them); then RV(gpus_missing) is true.
  - The pod's own variables, which RunPod gives PID 1 only (not SSH sessions), are read from C(/proc/1/environ),
    those whose names start with one of O(env_prefixes), never one whose name looks secret.
  - Used by the C(trainops.gpu.bootstrap) role, which writes the environment file and fails on RV(problems).
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode the write probe is skipped; C(durable.writable) then comes from C(access(2)).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  durable_root:
    description:
      - The pod's durable root (network volume or persistent mount).
    type: str
    default: /workspace
  min_free_gb_container:
    description:
      - Least free space, in GB (10^9 bytes), on the container disk (C(/)). V(0) checks nothing.
    type: float
    default: 0
  min_free_gb_durable:
    description:
      - Least free space, in GB (10^9 bytes), on the durable root. V(0) checks nothing.
    type: float
    default: 0
  expect_gpu_count:
    description:
      - How many GPUs the pod was created with. V(0) means a CPU pod (torch is only reported). Omitted, the count
        is only reported.
    type: int
  expect_gpu_name:
    description:
      - A string every GPU's name (as C(nvidia-smi) prints it) must contain, compared case-insensitively,
        for example V(H100). Omitted, names are only reported.
    type: str
  min_cuda_version:
    description:
      - Least CUDA version the driver supports (C(nvidia-smi)'s header), for example V(12.4). Omitted, only reported.
    type: str
  fail_on_missing_gpus:
    description:
      - Whether a pod that came back without its GPUs is listed in RV(problems). Either way RV(gpus_missing) is
        true and RV(ready) false.
    type: bool
    default: true
  torch_check:
    description:
      - Whether torch must see the expected GPUs (O(expect_gpu_count) > 0).
      - V(require) always; V(report) never (only reported); V(auto) requires it unless every GPU's name ends in
        C((emulated)) (the local emulator's pods have a CPU build of torch).
    type: str
    choices: [auto, require, report]
    default: auto
  python:
    description:
      - The Python interpreter whose torch is asked.
    type: str
    default: python3
  torch_timeout:
    description:
      - Seconds the torch query may take before it is killed (then reported as an error).
    type: int
    default: 120
  env_prefixes:
    description:
      - Names of PID 1's variables to return in RV(pod_env) start with one of these.
    type: list
    elements: str
    default: [RUNPOD_]
  secret_words:
    description:
      - A variable whose name contains one of these words (case-insensitive) is never returned; only its name is
        listed in RV(skipped_env).
    type: list
    elements: str
    default: [KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, AUTH, PRIVATE, CERT]
notes:
  - Needs to read C(/proc/1/environ), which is root's (RunPod's SSH user is root).
"""

EXAMPLES = r"""
- name: What the pod has
  trainops.gpu.pod_facts:
    durable_root: /workspace
    min_free_gb_durable: 20
    expect_gpu_count: 2
    expect_gpu_name: H100
    min_cuda_version: "12.4"
  register: pod

- name: Refuse a pod that is not ready
  ansible.builtin.fail:
    msg: "{{ pod.problems | join('; ') }}"
  when: pod.problems | length > 0
"""

RETURN = r"""
ready:
  description: True when nothing is wrong (no RV(problems)) and no GPU is missing.
  returned: always
  type: bool
problems:
  description: What is not ready, one sentence each.
  returned: always
  type: list
  elements: str
  sample: ["durable root /workspace is not writable: [Errno 30] Read-only file system"]
gpus_missing:
  description: True when GPUs were expected (O(expect_gpu_count) > 0) and C(nvidia-smi) found none.
  returned: always
  type: bool
durable:
  description:
    - The durable root. C(kind) is V(mount) (a mount point), V(directory) (an existing directory that is not a
      mount point, so it is on the container disk's file system or a parent mount) or V(missing).
    - C(writable_check) says how C(writable) was found (V(probe), or V(access) in check mode).
  returned: always
  type: dict
  sample: {"path": "/workspace", "kind": "mount", "fstype": "ext4", "source": "/dev/sdb", "writable": true,
           "writable_check": "probe", "free_gb": 120.5, "total_gb": 200.0}
container_disk:
  description: The container disk C(/) (C(free_gb), C(total_gb)).
  returned: always
  type: dict
gpus:
  description:
    - What C(nvidia-smi) shows. C(nvidia_smi) is its path (null when absent), C(count), C(names), C(name)
      (the first), C(driver_version), C(cuda_version), C(emulated) (names end in C((emulated))), C(error).
  returned: always
  type: dict
torch:
  description:
    - Torch's view. C(present), C(version), C(cuda_available), C(device_count), C(cuda_version) (torch's build),
      C(error).
  returned: always
  type: dict
detach:
  description:
    - How the job module can detach a job. C(tmux) (its path, or null), C(setsid) (a new session could be made),
      C(launcher) (V(tmux), V(setsid) or null).
  returned: always
  type: dict
pod_env:
  description: PID 1's variables named with an O(env_prefixes) prefix and not secret-looking, by name.
  returned: always
  type: dict
  sample: {"RUNPOD_POD_ID": "abc123", "RUNPOD_GPU_COUNT": "1"}
pod_env_error:
  description: Why C(/proc/1/environ) could not be read (then RV(pod_env) is empty), else null.
  returned: always
  type: str
skipped_env:
  description: Names (only) of PID 1's variables left out because they look secret.
  returned: always
  type: list
  elements: str
"""

import contextlib
import json
import os
import re
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.gpu.plugins.module_utils._pod_tools import setsid_works

GB = 1000**3
EMULATED_SUFFIX = "(emulated)"
TORCH_QUERY = (
    "import json\n"
    "try:\n"
    "    import torch\n"
    "except Exception as exc:\n"
    "    print(json.dumps({'present': False, 'error': '%s: %s' % (type(exc).__name__, exc)}))\n"
    "else:\n"
    "    ok = bool(torch.cuda.is_available())\n"
    "    print(json.dumps({'present': True, 'version': torch.__version__, 'cuda_available': ok,\n"
    "                      'device_count': int(torch.cuda.device_count()) if ok else 0,\n"
    "                      'cuda_version': torch.version.cuda}))\n"
)


def disk_space(path):
    st = os.statvfs(path)
    return {
        "path": path,
        "free_gb": round(st.f_bavail * st.f_frsize / GB, 3),
        "total_gb": round(st.f_blocks * st.f_frsize / GB, 3),
    }


def mount_of(path):
    """The mountinfo entry whose mount point is exactly path, as (source, fstype), or None."""
    try:
        with open("/proc/self/mountinfo") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ("unknown", "unknown") if os.path.ismount(path) else None
    found = None
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        if point == path:
            after = line.split(" - ", 1)[1].split()
            found = (after[1] if len(after) > 1 else "", after[0] if after else "")
    return found


def write_probe(path):
    """Write, fsync and remove a probe file in path: None when it worked, else the error."""
    try:
        fd, name = tempfile.mkstemp(prefix=".trainops-probe-", dir=path)
    except OSError as exc:
        return str(exc)
    try:
        os.write(fd, b"trainops bootstrap probe\n")
        os.fsync(fd)
    except OSError as exc:
        return str(exc)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)
    return None


def durable_facts(path, check_mode):
    facts = {
        "path": path,
        "kind": "missing",
        "fstype": None,
        "source": None,
        "writable": False,
        "writable_check": None,
        "writable_error": None,
        "free_gb": None,
        "total_gb": None,
    }
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        if os.path.exists(real):
            facts["kind"] = "not a directory"
        return facts
    mount = mount_of(real)
    facts["kind"] = "mount" if mount else "directory"
    if mount:
        facts["source"], facts["fstype"] = mount
    facts.update({k: v for k, v in disk_space(real).items() if k != "path"})
    if check_mode:
        facts["writable_check"] = "access"
        facts["writable"] = os.access(real, os.W_OK | os.X_OK)
    else:
        facts["writable_check"] = "probe"
        facts["writable_error"] = write_probe(real)
        facts["writable"] = facts["writable_error"] is None
    return facts


def gpu_facts(module):
    facts = {
        "nvidia_smi": module.get_bin_path("nvidia-smi"),
        "count": 0,
        "names": [],
        "name": None,
        "driver_version": None,
        "cuda_version": None,
        "emulated": False,
        "error": None,
    }
    smi = facts["nvidia_smi"]
    if not smi:
        facts["error"] = "nvidia-smi not found"
        return facts
    rc, out, err = module.run_command([smi, "--query-gpu=index,name,driver_version", "--format=csv,noheader"])
    if rc != 0:
        facts["error"] = (out + err).strip() or "nvidia-smi exited %d" % rc
        return facts
    for line in out.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            facts["names"].append(parts[1])
            facts["driver_version"] = parts[2]
    facts["count"] = len(facts["names"])
    facts["name"] = facts["names"][0] if facts["names"] else None
    facts["emulated"] = bool(facts["names"]) and all(n.endswith(EMULATED_SUFFIX) for n in facts["names"])
    rc, out, err = module.run_command([smi])
    match = re.search(r"CUDA Version:\s*([0-9][0-9.]*)", out)
    if match:
        facts["cuda_version"] = match.group(1)
    match = re.search(r"Driver Version:\s*([0-9][0-9.]*)", out)
    if match and not facts["driver_version"]:
        facts["driver_version"] = match.group(1)
    return facts


def torch_facts(python, timeout):
    facts = {
        "present": False,
        "version": None,
        "cuda_available": False,
        "device_count": 0,
        "cuda_version": None,
        "error": None,
    }
    try:
        done = subprocess.run(
            [python, "-c", TORCH_QUERY],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=dict(os.environ, CUDA_MODULE_LOADING="LAZY"),
        )
    except subprocess.TimeoutExpired:
        facts["error"] = "the torch query took more than %d s" % timeout
        return facts
    except OSError as exc:
        facts["error"] = "%s cannot run: %s" % (python, exc)
        return facts
    try:
        facts.update(json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        facts["error"] = "torch query exited %d: %s" % (done.returncode, (done.stdout + done.stderr).strip()[-300:])
    return facts


def detach_facts(module):
    tmux = module.get_bin_path("tmux")
    # The job module's fallback: a child that makes its own session with setsid(2).
    setsid = setsid_works()
    return {"tmux": tmux, "setsid": setsid, "launcher": "tmux" if tmux else ("setsid" if setsid else None)}


def pod_env(prefixes, secret_words):
    try:
        with open("/proc/1/environ", "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        return {}, [], str(exc)
    env, skipped = {}, []
    words = [word.upper() for word in secret_words]
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if not sep:
            continue
        name = name.decode("utf-8", "replace")
        if not any(name.startswith(prefix) for prefix in prefixes):
            continue
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            continue
        if any(word in name.upper() for word in words):
            skipped.append(name)
            continue
        env[name] = value.decode("utf-8", "replace")
    return env, sorted(skipped), None


def version_tuple(text):
    return tuple(int(part) for part in re.findall(r"\d+", text or ""))


def judge(params, durable, container, gpus, torch, detach):
    """(problems, gpus_missing): what keeps this pod from training, against what was asked for."""
    problems = []
    if durable["kind"] == "missing":
        problems.append("durable root %s does not exist" % durable["path"])
    elif durable["kind"] == "not a directory":
        problems.append("durable root %s is not a directory" % durable["path"])
    elif not durable["writable"]:
        problems.append(
            "durable root %s is not writable%s"
            % (durable["path"], (": " + durable["writable_error"]) if durable["writable_error"] else "")
        )
    if params["min_free_gb_container"] > 0 and container["free_gb"] < params["min_free_gb_container"]:
        problems.append(
            "container disk / has %.2f GB free, below bootstrap_min_free_gb_container %s"
            % (container["free_gb"], params["min_free_gb_container"])
        )
    if (
        durable["free_gb"] is not None
        and params["min_free_gb_durable"] > 0
        and durable["free_gb"] < params["min_free_gb_durable"]
    ):
        problems.append(
            "durable root %s has %.2f GB free, below bootstrap_min_free_gb_durable %s"
            % (durable["path"], durable["free_gb"], params["min_free_gb_durable"])
        )
    if not detach["launcher"]:
        problems.append("neither tmux nor setsid can detach a job")
    expected = params["expect_gpu_count"]
    missing = bool(expected) and expected > 0 and gpus["count"] == 0
    if missing:
        if params["fail_on_missing_gpus"]:
            problems.append(
                "the pod came back without its GPUs: %d expected, nvidia-smi found none (%s)"
                % (expected, gpus["error"] or "no GPU listed")
            )
        return problems, missing
    if expected is not None and gpus["count"] != expected:
        problems.append("%d GPUs expected, nvidia-smi found %d" % (expected, gpus["count"]))
    wanted = params["expect_gpu_name"]
    if wanted and gpus["count"]:
        wrong = [name for name in gpus["names"] if wanted.lower() not in name.lower()]
        if wrong:
            problems.append("GPU name %r expected, found %s" % (wanted, ", ".join(sorted(set(wrong)))))
    if params["min_cuda_version"] and (expected or gpus["count"]):
        found = gpus["cuda_version"]
        if not found:
            problems.append("CUDA %s or newer expected, nvidia-smi shows no CUDA version" % params["min_cuda_version"])
        elif version_tuple(found) < version_tuple(params["min_cuda_version"]):
            problems.append("CUDA %s or newer expected, the driver supports %s" % (params["min_cuda_version"], found))
    check = params["torch_check"]
    if expected and (check == "require" or (check == "auto" and not gpus["emulated"])):
        if not torch["present"]:
            problems.append("torch is not importable by %s: %s" % (params["python"], torch["error"]))
        elif not torch["cuda_available"] or torch["device_count"] != expected:
            problems.append(
                "torch sees %d GPUs (cuda available: %s), %d expected"
                % (torch["device_count"], torch["cuda_available"], expected)
            )
    return problems, missing


def main():
    module = AnsibleModule(
        argument_spec={
            "durable_root": {"type": "str", "default": "/workspace"},
            "min_free_gb_container": {"type": "float", "default": 0},
            "min_free_gb_durable": {"type": "float", "default": 0},
            "expect_gpu_count": {"type": "int"},
            "expect_gpu_name": {"type": "str"},
            "min_cuda_version": {"type": "str"},
            "fail_on_missing_gpus": {"type": "bool", "default": True},
            "torch_check": {"type": "str", "default": "auto", "choices": ["auto", "require", "report"]},
            "python": {"type": "str", "default": "python3"},
            "torch_timeout": {"type": "int", "default": 120},
            "env_prefixes": {"type": "list", "elements": "str", "default": ["RUNPOD_"]},
            "secret_words": {
                "type": "list",
                "elements": "str",
                "no_log": False,
                "default": ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PRIVATE", "CERT"],
            },
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["expect_gpu_count"] is not None and params["expect_gpu_count"] < 0:
        module.fail_json(msg="expect_gpu_count must be >= 0")
    if params["min_cuda_version"] and not re.match(r"^\d+(\.\d+)*$", params["min_cuda_version"]):
        module.fail_json(msg="min_cuda_version must look like 12.4, got %r" % params["min_cuda_version"])
    durable = durable_facts(params["durable_root"], module.check_mode)
    container = disk_space("/")
    gpus = gpu_facts(module)
    torch = torch_facts(params["python"], params["torch_timeout"])
    detach = detach_facts(module)
    env, skipped, env_error = pod_env(params["env_prefixes"], params["secret_words"])
    problems, missing = judge(params, durable, container, gpus, torch, detach)
    module.exit_json(
        changed=False,
        ready=not problems and not missing,
        problems=problems,
        gpus_missing=missing,
        durable=durable,
        container_disk=container,
        gpus=gpus,
        torch=torch,
        detach=detach,
        pod_env=env,
        skipped_env=skipped,
        pod_env_error=env_error,
    )


if __name__ == "__main__":
    main()
