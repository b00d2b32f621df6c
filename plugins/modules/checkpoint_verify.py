#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: checkpoint_verify
short_description: Verify trainops checkpoints on the target host and find the newest valid one
version_added: 0.1.0
description:
  - Verifies one checkpoint directory (C(step-NNNNNNNN)) or a checkpoint root holding several, following
    the trainops checkpoint format (see docs/checkpoints.md). For each checkpoint it checks that
    C(SHA256SUMS) and C(manifest.json) are present and well formed, that they list the same files, that
    no unlisted file is present, and the size and sha256 of every file.
  - For a root it also checks the manifest chain (each manifest names the sha256 of its predecessor's
    manifest, when that predecessor is still present) and reports the newest valid checkpoint, the
    corrupt ones with the reasons, leftover temporary directories of interrupted saves, and the
    checkpoints already moved aside.
  - With O(load=true) the newest valid checkpoint is also loaded with C(torch.load(weights_only=True)) in a
    separate Python process with a timeout; a checkpoint that verifies but does not load counts as
    corrupt and the next newest is tried.
  - With O(quarantine=true) corrupt checkpoints are renamed aside (C(step-NNNNNNNN.corrupt-<UTC time>)),
    never deleted. Temporary directories are only reported, never moved, since a save may be in progress.
    Quarantine is refused while a trainer holds the root's C(.writer.lock).
  - The same format definition is used by the reference trainer that writes the checkpoints.
  - A sealed checkpoint (a directory or a file another writer made, a framework's C(checkpoint-120/) or a
    C(torch.save) file, sealed by the training package's C(seal())) is verified the same way against its
    C(trainops-seal.json) and C(SHA256SUMS), inside the directory or beside the file. Under a root, sealed
    checkpoints take their place among the others by the step their seal claims; anything that could be a
    checkpoint but carries no seal is listed in RV(unsealed), never valid.
  - A sealed directory holding C(trainer_state.json) is a Hugging Face Trainer's C(checkpoint-N/) (C(framework)
    V(transformers) in its entry). Beyond its seal it must hold what the Trainer resumes from, each missing one
    named - its weights (C(model.safetensors), C(pytorch_model.bin), a PEFT adapter, FSDP's files, or an index and
    every shard the index names), C(optimizer.pt) and C(scheduler.pt) (or DeepSpeed's C(global_step*/)) and
    C(rng_state.pth) (or one per rank). No transformers is needed on the controller.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is moved; RV(quarantined) lists what would be moved, and C(changed) says
        whether anything would be.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  path:
    description:
      - A checkpoint directory (named C(step-NNNNNNNN), or holding C(SHA256SUMS), C(manifest.json) or
        C(trainops-seal.json)), a sealed checkpoint file, or a checkpoint root that holds checkpoints
        (usually C(<durable>/trainops/<run_id>/ckpt)).
      - A run directory (one with a C(ckpt) subdirectory and no checkpoints of its own) stands for its C(ckpt).
    type: path
    required: true
  load:
    description:
      - Also load the newest valid checkpoint's files with C(torch.load(weights_only=True)), in a subprocess
        of O(python) bounded by O(load_timeout). Needs torch on the target host.
      - A transformers checkpoint is loaded as its Trainer resumes it - the weights with
        C(safetensors.torch.load_file) (C(safetensors) needed there), C(optimizer.pt) and C(scheduler.pt) with
        C(torch.load(weights_only=True)), C(rng_state.pth) the same with numpy's arrays allowed; its
        C(training_args.bin), a pickle of the arguments that no resume loads, is not loaded.
    type: bool
    default: false
  load_timeout:
    description:
      - Seconds the load of one checkpoint may take before the subprocess is killed and the module fails.
    type: int
    default: 300
  verify_timeout:
    description:
      - Seconds the whole verification (every checkpoint's files read and hashed) may take. Past it the
        module fails, naming the checkpoint it was verifying in RV(timed_out); older checkpoints are listed
        in RV(unverified). The hashing loop checks the deadline before each 4 MiB read, so a huge or sparse
        file cannot hold the module for hours.
      - O(load_timeout) bounds the load separately.
    type: int
    default: 600
  python:
    description:
      - Python interpreter (with torch) used for O(load). Defaults to the interpreter running this module.
    type: path
  quarantine:
    description:
      - Move corrupt checkpoints aside (renamed, never deleted). Off by default so that verification alone
        never changes anything.
      - Fails, moving nothing, while a trainer holds the root's C(.writer.lock) (it is writing or pruning there).
    type: bool
    default: false
  require_valid:
    description:
      - Fail when no valid checkpoint is found (for a single checkpoint, when it is not valid).
    type: bool
    default: false
  kind:
    description:
      - How to read O(path). V(auto) takes a directory as one checkpoint when it looks like one (a C(step-N)
        name, or C(SHA256SUMS), C(manifest.json) or C(trainops-seal.json) inside) and as a root otherwise.
      - V(checkpoint) takes O(path) as one checkpoint whatever it holds, so that a framework's directory that
        was never sealed is reported as one unsealed checkpoint rather than as an empty root (the sync role's
        pull and the resume drill name the checkpoint they pulled). V(root) takes it as a root.
    type: str
    choices: [auto, checkpoint, root]
    default: auto
notes:
  - Reads every file of every checkpoint under a root in full, streaming through a fixed buffer, within
    O(verify_timeout).
  - Reads only regular files and never follows a symbolic link inside the root. A step directory, or any file
    in one, that is a symbolic link, a FIFO or a device makes that checkpoint corrupt; a C(latest) that is not
    a small regular file naming a checkpoint gives a null RV(latest_hint). A C(step-<digits>) directory not
    spelled like its step's canonical name (C(step-000000200), C(step-200)) is reported corrupt with the
    reason C(non-canonical name).
  - A manifest.json or SHA256SUMS over 1 MiB, or a manifest nested more than 32 levels deep, is malformed.
    Whatever goes wrong while verifying one checkpoint becomes that checkpoint's error.
seealso:
  - name: trainops checkpoint format
    description: Layout, SHA256SUMS and manifest schema (docs/checkpoints.md in the collection).
    link: https://example.invalid/trainops/gpu/docs/checkpoints.md
"""

EXAMPLES = r"""
- name: Verify every checkpoint of a run and find the newest valid one
  trainops.gpu.checkpoint_verify:
    path: /workspace/trainops/run42/ckpt
  register: ckpt

- name: Before teardown, the newest checkpoint must verify and load
  trainops.gpu.checkpoint_verify:
    path: /workspace/trainops/run42/ckpt
    load: true
    load_timeout: 600
    python: /workspace/venv/bin/python
    require_valid: true

- name: Move corrupt checkpoints aside so the trainer does not meet them again
  trainops.gpu.checkpoint_verify:
    path: /workspace/trainops/run42/ckpt
    quarantine: true

- name: Verify a single checkpoint pulled to the controller
  trainops.gpu.checkpoint_verify:
    path: "{{ playbook_dir }}/runs/run42/ckpt/step-00001200"
  delegate_to: localhost
"""

RETURN = r"""
path:
  description: The directory that was verified (the C(ckpt) subdirectory when O(path) was a run directory).
  returned: always
  type: str
  sample: /workspace/trainops/run42/ckpt
kind:
  description: Whether O(path) was treated as one checkpoint or as a root of checkpoints.
  returned: always
  type: str
  sample: root
valid:
  description: For a root, whether a valid checkpoint exists; for one checkpoint, whether it is valid.
  returned: always
  type: bool
  sample: true
newest_valid_step:
  description: Step of the newest valid checkpoint (loaded too, with O(load=true)); null when there is none.
  returned: always
  type: int
  sample: 1200
newest_valid_path:
  description: Path of the newest valid checkpoint; null when there is none.
  returned: always
  type: str
  sample: /workspace/trainops/run42/ckpt/step-00001200
corrupt:
  description: Checkpoints that failed verification or loading, newest first, with the reasons.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: Path of the checkpoint directory.
      type: str
    step:
      description: Its step, when known.
      type: int
    errors:
      description: What is wrong with it.
      type: list
      elements: str
  sample: [{"path": "/ckpt/step-00001300", "step": 1300, "errors": ["model.pt: sha256 mismatch"]}]
checkpoints:
  description: Per-checkpoint details, newest first.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: Path of the checkpoint directory.
      type: str
    step:
      description: Its step.
      type: int
    layout:
      description:
        - C(native) (the trainops format, C(step-NNNNNNNN/) with C(manifest.json)), or a sealed checkpoint's
          kind, C(directory) or C(file).
      type: str
    framework:
      description: V(transformers) for a Trainer's C(checkpoint-N/) (its layout checked too); null otherwise.
      type: str
    valid:
      description: Whether it verified (and loaded, when it was loaded).
      type: bool
    errors:
      description: What is wrong with it; empty when valid.
      type: list
      elements: str
    manifest_sha256:
      description: sha256 of its manifest.json.
      type: str
    previous_step:
      description: Step of the checkpoint its manifest chains to.
      type: int
    previous_manifest_sha256:
      description: sha256 of the predecessor's manifest.json as recorded in this manifest.
      type: str
    run_id:
      description: Run id recorded in the manifest.
      type: str
    config_hash:
      description: Hash of the training config recorded in the manifest.
      type: str
    world_size:
      description: Number of training processes that wrote it.
      type: int
    created_at:
      description: When it was written (ISO 8601 with time zone).
      type: str
    files:
      description: For each file, its size, sha256 and whether it matched.
      type: dict
    bytes_total:
      description: Total size of its files.
      type: int
    loaded:
      description: Result of the load, when O(load=true) loaded it.
      type: dict
stray_temp:
  description: Temporary directories left by interrupted saves (or a save in progress); never valid, never moved.
  returned: always
  type: list
  elements: str
aside:
  description: Directories already moved aside (corrupt checkpoints, partial saves).
  returned: always
  type: list
  elements: str
deleting:
  description:
    - Checkpoints being pruned (C(.deleting-step-NNNNNNNN-<hex>)), renamed before removal; never valid, never moved.
    - A trainer that died while pruning leaves one behind; the next trainer start finishes its removal.
  returned: always
  type: list
  elements: str
unsealed:
  description:
    - Entries of a root that could be checkpoints (directories, files, symbolic links) but carry no seal;
      never verified, never valid. C(seal()) from the training package seals one.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The entry's path.
      type: str
    step:
      description: The last number in its name, when there is one.
      type: int
    why:
      description: What makes it unsealed (no C(SHA256SUMS), a symbolic link).
      type: str
unverified:
  description:
    - Committed checkpoints listed but not verified, because verification stopped at the newest valid one.
    - This module verifies every checkpoint, so the list is empty; it is returned so that nothing the
      verification found is dropped.
  returned: always
  type: list
  elements: str
latest_hint:
  description:
    - The checkpoint name the root's C(latest) file holds, a hint only. Null when C(latest) is absent, is a
      symbolic link or not a small regular file, or holds anything but a canonical C(step-NNNNNNNN) name.
  returned: always
  type: str
  sample: step-00001200
timed_out:
  description:
    - Path of the checkpoint whose verification passed O(verify_timeout) (the module then fails); null otherwise.
    - It is neither valid nor corrupt (never quarantined); the older ones are in RV(unverified).
  returned: always
  type: str
  sample: null
quarantined:
  description: Corrupt checkpoints moved aside by this run (in check mode, those that would be).
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: Where the checkpoint was.
      type: str
    moved_to:
      description: Where it was moved (would be moved, in check mode).
      type: str
loaded:
  description:
    - The load of the newest valid checkpoint, with O(load=true); null otherwise. C(files) counts the files
      loaded; a sealed directory with nothing that C(torch.load) reads (by suffix C(.pt), C(.pth), C(.bin),
      C(.ckpt)) loads nothing and says so in C(note); a transformers checkpoint's C(note) names what it did not
      load (C(training_args.bin)).
  returned: always
  type: dict
  sample: {"path": "/ckpt/step-00001200", "ok": true, "torch_version": "2.13.0+cpu", "seconds": 0.4, "files": 3}
"""

import json
import os
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.trainops.gpu.plugins.module_utils._checkpoint_format import (
    ASIDE_CORRUPT,
    FRAMEWORK_TRANSFORMERS,
    WRITER_LOCK_NAME,
    CheckpointFormatError,
    RootReport,
    aside_target,
    is_checkpoint_dir,
    is_sealed_checkpoint,
    move_checkpoint_aside,
    parse_step_dirname,
    verify_checkpoint,
    verify_root,
    writer_lock_held,
)
from ansible_collections.trainops.gpu.plugins.module_utils._run_layout import RunLayout

# Runs in a separate interpreter: loads each file of the JSON list [[path, how], ...] on its standard input and
# prints one JSON object. how: "torch" (torch.load, weights_only), "torch+numpy" (the same with numpy's arrays
# allowed, as transformers loads its rng_state.pth), "safetensors" (safetensors.torch.load_file). Exit 3 means
# torch is not importable there.
LOAD_SCRIPT = r"""
import json, sys, time
try:
    import torch
except Exception as exc:
    sys.stdout.write(json.dumps({"torch": False, "error": "%s: %s" % (type(exc).__name__, exc)}))
    raise SystemExit(3)


def numpy_globals():
    import numpy as np
    core = np._core if hasattr(np, "_core") else np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load(path, how):
    if how == "safetensors":
        from safetensors.torch import load_file
        load_file(path, device="cpu")
    elif how == "torch+numpy":
        with torch.serialization.safe_globals(numpy_globals()):
            torch.load(path, map_location="cpu", weights_only=True)
    else:
        torch.load(path, map_location="cpu", weights_only=True)


files = {}
for path, how in json.loads(sys.stdin.read()):
    started = time.time()
    try:
        load(path, how)
        files[path] = {"ok": True, "how": how, "seconds": round(time.time() - started, 3)}
    except Exception as exc:
        files[path] = {"ok": False, "how": how, "error": ("%s: %s" % (type(exc).__name__, exc))[:500]}
sys.stdout.write(json.dumps({"torch": True, "torch_version": torch.__version__, "files": files}))
"""

KILL_GRACE_SECONDS = 5

# What the module returns of a RootReport (all of it but its root, which `path` replaces).
REPORT_KEYS = (
    "newest_valid_step",
    "newest_valid_path",
    "corrupt",
    "checkpoints",
    "unverified",
    "stray_temp",
    "deleting",
    "aside",
    "unsealed",
    "latest_hint",
    "timed_out",
)


# The files of a sealed checkpoint that a load tries (a native one's are all torch.save files).
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


# A transformers checkpoint's files as its Trainer loads them on resume; training_args.bin is a pickle of the
# TrainingArguments (for people, never loaded by a resume) and is left out.
TRANSFORMERS_SKIPPED = ("training_args.bin",)


def _how(report, name):
    """How a sealed directory's file is loaded: "torch", "torch+numpy", "safetensors", or None (not loaded)."""
    if report.framework == FRAMEWORK_TRANSFORMERS:
        if name in TRANSFORMERS_SKIPPED:
            return None
        if name.endswith(".safetensors"):
            return "safetensors"
        if name.startswith("rng_state") and name.endswith(".pth"):
            return "torch+numpy"
    return "torch" if name.endswith(TORCH_SUFFIXES) else None


def loadable_files(report):
    """[(path, how)]: every file of a native checkpoint and the file of a sealed file (torch.load), and the files
    of a sealed directory that torch.save writes (by suffix: a framework's JSON or DCP shards are not
    torch.load's); in a transformers checkpoint, its weights with safetensors and its rng_state with numpy's
    arrays allowed, as the Trainer's resume loads them."""
    if report.layout == "file":
        return [(report.path, "torch")]
    if report.layout == "native":
        return [(os.path.join(report.path, name), "torch") for name in sorted(report.files)]
    found = [(os.path.join(report.path, name), _how(report, name)) for name in sorted(report.files)]
    return [(path, how) for path, how in found if how]


def load_checkpoint(module, report):
    """Load every file of a verified checkpoint in a subprocess; returns the load record."""
    python = module.params["python"] or sys.executable
    timeout = module.params["load_timeout"]
    timeout_bin = module.get_bin_path("timeout", required=True)
    files = loadable_files(report)
    if not files:
        note = "nothing in it that torch loads (%s)" % ", ".join(TORCH_SUFFIXES)
        return dict(path=report.path, ok=True, errors=[], torch_version=None, seconds=0.0, files=0, note=note)
    started = time.time()
    # the plan on standard input: a checkpoint of thousands of files would not fit in one argument
    plan = json.dumps([[path, how] for path, how in files])
    command = [timeout_bin, "--kill-after=%d" % KILL_GRACE_SECONDS, str(timeout), python, "-c", LOAD_SCRIPT]
    rc, stdout, stderr = module.run_command(command, data=plan)
    seconds = round(time.time() - started, 3)
    if rc in (124, 137):
        module.fail_json(msg="loading %s timed out after %d seconds" % (report.path, timeout), path=report.path)
    try:
        result = json.loads(stdout)
    except ValueError:
        # timeout(1) passes on a signal that killed the load before the deadline (the OOM killer, say)
        how = "was killed by signal %d" % -rc if rc < 0 else "failed (rc=%d)" % rc
        module.fail_json(
            msg="loading %s with %s %s: %s" % (report.path, python, how, stderr.strip()[-2000:]),
            path=report.path,
        )
    if not result.get("torch"):
        module.fail_json(msg="load needs torch, but %s cannot import it: %s" % (python, result.get("error")))
    errors = [
        "%s: load failed: %s" % (os.path.basename(path), entry["error"])
        for path, entry in sorted(result["files"].items())
        if not entry["ok"]
    ]
    loaded = {
        "path": report.path,
        "ok": not errors,
        "errors": errors,
        "torch_version": result.get("torch_version"),
        "seconds": seconds,
        "files": len(files),
    }
    if report.framework == FRAMEWORK_TRANSFORMERS:
        loaded["note"] = "loaded as transformers' Trainer resumes: %s not loaded (a pickle of the arguments)" % (
            ", ".join(TRANSFORMERS_SKIPPED)
        )
    return loaded


ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    load=dict(type="bool", default=False),
    load_timeout=dict(type="int", default=300),
    verify_timeout=dict(type="int", default=600),
    python=dict(type="path"),
    quarantine=dict(type="bool", default=False),
    require_valid=dict(type="bool", default=False),
    kind=dict(type="str", default="auto", choices=["auto", "checkpoint", "root"]),
)


def resolve_path(module):
    """The directory to verify: O(path), or the C(ckpt) of a run directory; fails on bad parameters."""
    path = module.params["path"].rstrip("/") or "/"
    for option in ("load_timeout", "verify_timeout"):
        if module.params[option] < 1:
            module.fail_json(msg="%s must be at least 1 second, got %d" % (option, module.params[option]))
    kind = module.params["kind"]
    if kind != "root" and os.path.isfile(path) and not os.path.islink(path) and is_sealed_checkpoint(path):
        return path  # a sealed checkpoint file
    if not os.path.isdir(path):
        module.fail_json(msg="path %s is neither a directory nor a checkpoint file" % path)
    if module.params["python"] and not os.access(module.params["python"], os.X_OK):
        module.fail_json(msg="python %s is not an executable file" % module.params["python"])
    run_ckpt = RunLayout.from_run_dir(path).ckpt
    names = []  # type: list[str]
    try:
        names = os.listdir(path)
    except OSError as exc:
        module.fail_json(msg="cannot list %s: %s" % (path, to_native(exc)))
    holds_checkpoints = any(parse_step_dirname(name) is not None for name in names)
    if kind == "auto" and not is_checkpoint_dir(path) and os.path.isdir(run_ckpt) and not holds_checkpoints:
        return run_ckpt  # a run directory stands for its ckpt/
    return path


def verify(module, path):
    """(kind, RootReport): one checkpoint, or every checkpoint under a root with the manifest chain,
    within verify_timeout seconds."""
    deadline = time.monotonic() + module.params["verify_timeout"]
    kind = module.params["kind"]
    if kind == "checkpoint" or (kind == "auto" and (is_checkpoint_dir(path) or os.path.isfile(path))):
        root_report = RootReport(os.path.dirname(path))
        checkpoint = verify_checkpoint(path, deadline=deadline)
        root_report.checkpoints.append(checkpoint)
        root_report.timed_out = checkpoint.path if checkpoint.timed_out else None
        return "checkpoint", root_report
    root_report = None
    try:
        root_report = verify_root(path, deadline=deadline)
    except (CheckpointFormatError, OSError) as exc:
        module.fail_json(msg="cannot verify %s: %s" % (path, to_native(exc)))
    return "root", root_report


def load_newest(module, root_report):
    """Load valid checkpoints newest first until one loads; one that does not load becomes corrupt.
    Returns the load records by checkpoint path."""
    loads = {}
    for report in root_report.checkpoints:
        if not report.valid:
            continue
        record = load_checkpoint(module, report)
        loads[report.path] = record
        if record["ok"]:
            break
        report.errors.extend(record["errors"])
    return loads


def quarantine(module, root_report):
    """Move corrupt checkpoints aside (in check mode, only say where); refused while a trainer runs."""
    if not root_report.corrupt:
        return []
    trainer_running = False
    try:
        trainer_running = writer_lock_held(root_report.root)
    except OSError as exc:
        module.fail_json(msg="cannot check the writer lock of %s: %s" % (root_report.root, to_native(exc)))
    if trainer_running:
        module.fail_json(
            msg="quarantine refused: a trainer holds %s/%s and moves corrupt checkpoints aside itself; "
            "stop it first, or verify without quarantine" % (root_report.root, WRITER_LOCK_NAME)
        )
    quarantined = []
    for report in root_report.corrupt:
        if not os.path.lexists(report.path) and report.layout != "file":
            continue
        if module.check_mode:
            quarantined.append({"path": report.path, "moved_to": aside_target(report.path, ASIDE_CORRUPT)})
            continue
        try:
            moved = move_checkpoint_aside(report.path, ASIDE_CORRUPT, report.layout)
        except OSError as exc:
            module.fail_json(msg="cannot move %s aside: %s" % (report.path, to_native(exc)), quarantined=quarantined)
        quarantined.append({"path": report.path, "moved_to": moved})
    return quarantined


def build_result(path, kind, root_report, loads, quarantined):
    """The module's result: the report's every entry, the loads, and what was quarantined."""
    summary = root_report.to_dict()
    for entry in summary["checkpoints"]:
        entry["loaded"] = loads.get(entry["path"])
    newest = root_report.newest_valid
    result = dict(changed=bool(quarantined), path=path, kind=kind, valid=newest is not None)
    result.update((key, summary[key]) for key in REPORT_KEYS)
    result.update(quarantined=quarantined, loaded=loads.get(newest.path) if newest is not None else None)
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    path = resolve_path(module)
    kind, root_report = verify(module, path)
    if root_report.timed_out is not None:
        result = build_result(path, kind, root_report, {}, [])
        module.fail_json(
            msg="verifying %s timed out after %d seconds (verify_timeout)"
            % (root_report.timed_out, module.params["verify_timeout"]),
            **result,
        )
    loads = load_newest(module, root_report) if module.params["load"] else {}
    quarantined = quarantine(module, root_report) if module.params["quarantine"] else []
    result = build_result(path, kind, root_report, loads, quarantined)
    if module.params["require_valid"] and not result["valid"]:
        what = "checkpoint %s is not valid" % path if kind == "checkpoint" else "no valid checkpoint under %s" % path
        module.fail_json(msg=what, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
