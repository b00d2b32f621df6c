#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provenance
short_description: Record a training run's provenance on the controller (source, command, config, env, pod)
version_added: 0.1.0
description:
  - Records where a run's source came from and exactly what ran, in C(<runs_dir>/<run_id>/provenance.json) on
    the controller. Run it on C(localhost); it needs only the Python standard library and C(git).
  - For a git work tree, the commit, branch, whether the tree is dirty (tracked changes or untracked files that
    git does not ignore) and the untracked files. The recorded files are those of
    C(git ls-files -co --exclude-standard) below O(src), each with its sha256, size and mode. A directory
    that is not in a git work tree is recorded too, every file under it, with no commit.
  - The same list is written as C(source.sha256) in coreutils format (C(sha256sum -c source.sha256) verifies a
    copy of the tree) and as C(source.files) (one path a line, for C(rsync --files-from)).
  - When the tree is dirty, or not in git, a source archive C(source.tar) holds exactly the recorded files.
    It is deterministic (sorted entries, mtime 0, uid and gid 0, no user or group names, GNU format without
    pax timestamps; the same bytes under any controller Python), so the same tree always gives the same archive
    sha256, and every file is checked against its manifest hash while it is archived.
  - Also recorded are the exact command (argument list and a shell-quoted string), the config file's path,
    sha256 and (for the reference trainer's config) its config hash, the environment overrides with the values
    of secret-looking names redacted, the pod, UTC timestamps, the controller's host name and tool versions.
  - Files are written atomically (temporary file, fsync, rename). A second run that finds the same source,
    command, config, env and pod changes nothing and keeps the first record's timestamps.
  - See docs/provenance.md for the record's fields and how to rebuild a dirty tree from its archive.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - In check mode everything is computed (the archive's sha256 too, built in memory) and returned, and
        nothing is written; C(changed) says whether anything would be.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  src:
    description:
      - The source directory, normally a git work tree (or a directory inside one).
    type: path
    required: true
  run_id:
    description:
      - The run's id. 1 to 128 letters, digits, C(.), C(_) or C(-), starting with a letter or digit; no path
        separators. Checked before anything is read or written.
    type: str
    required: true
  runs_dir:
    description:
      - Where run directories live on the controller; the record goes to C(<runs_dir>/<run_id>/).
      - A relative path is relative to the working directory of C(ansible-playbook); pass
        C({{ playbook_dir }}/runs) to pin it.
      - When it lies inside O(src) it is left out of the recorded files.
    type: path
    default: runs
  command:
    description:
      - The exact training command, as an argument list or as one string (split as a shell would split words).
    type: raw
    required: true
  config:
    description:
      - Path of the run's config file (JSON). Its path, size and sha256 are recorded.
    type: path
  config_is_trainer:
    description:
      - O(config) is the reference trainer's (C(trainops_train)) config; its config hash is recorded too, the
        same C(sha256:...) value the trainer writes into its checkpoints. An invalid trainer config fails.
      - Uses C(trainops_train.config) when that package is importable by the controller's Python, else a
        standard-library copy of its definition (JSON configs only).
    type: bool
    default: false
  env:
    description:
      - Environment overrides of the run (name to value).
      - The value of every name containing V(KEY), V(TOKEN), V(SECRET), V(PASSWORD), V(PASSWD), V(CREDENTIAL),
        V(AUTH) or V(PRIVATE) (any case) is recorded as V(<redacted>), never written anywhere, and hidden from
        this module's output. Any other occurrence of such a value (6 characters or longer) in the record, in a
        command argument say, is replaced by V(<redacted>) too; a path of the source tree holding one fails.
    type: dict
    default: {}
  venv:
    description:
      - The run's requirements venv, C(bootstrap_result.venv) of the bootstrap role (from M(trainops.gpu.pod_venv)).
      - Recorded as C(venv) with its C(requirements) (the file's name), C(key), C(python), C(venv_dir) and
        C(freeze) (what C(pip freeze) says it holds beyond the image's packages); whether this bootstrap built or
        reused it, and how long that took, are not (a rerun that reused it records the same thing).
    type: dict
  pod:
    description:
      - The pod the run executes on, recorded as given.
    type: dict
    suboptions:
      id:
        description: Pod id.
        type: str
      gpu_type:
        description: GPU type id (for example V(NVIDIA H100 80GB HBM3)).
        type: str
      gpu_count:
        description: Number of GPUs.
        type: int
      data_center:
        description: Data center id.
        type: str
      image:
        description: Container image.
        type: str
  archive:
    description:
      - When to write the source archive C(source.tar). V(auto) archives a dirty git tree and any directory
        that is not in git; V(always) archives every time; V(never) writes none (the source cannot then be
        rebuilt from the record alone).
      - When no archive is written, a C(source.tar) left by an earlier record of the same run is removed, so
        that it cannot be mistaken for this source.
    type: str
    choices: [auto, always, never]
    default: auto
  hash_cache:
    description:
      - Keep the sha256 of every regular file read in C(<runs_dir>/.cache/source-hashes/<key>.json) (one file per
        source directory, shared by its runs), keyed by size, mtime, ctime, inode and device, and read again only
        the files whose identity changed. A write changes a file's ctime, which no user call can set back, so an
        edit with its size and mtime restored is still read. Files changed within 2 seconds of the record are not
        cached (a second write in the same clock tick would not show).
      - V(false) reads every file every time, and neither reads nor writes the cache.
    type: bool
    default: true
notes:
  - Files are recorded as regular files or symbolic links (a link by its target text, and archived as a link;
    C(source.sha256) lists regular files only). A git submodule, a deleted tracked file and anything that is
    neither file nor link are listed in C(source.skipped) with the reason. Empty directories are not recorded.
  - A file name holding a line break, or not valid UTF-8, fails the module (it could not be listed for rsync).
  - The record's C(result) (exit code null, status V(unknown)) is for whoever records the run's end; a record
    rewritten by this module keeps the C(result) already there.
seealso:
  - name: trainops provenance
    description: What is recorded, the files, rebuilding and verifying a dirty tree (docs/provenance.md).
    link: https://example.invalid/trainops/gpu/docs/provenance.md
"""

EXAMPLES = r"""
- name: Record the run's provenance before syncing the source to the pod
  trainops.gpu.provenance:
    src: "{{ playbook_dir }}/.."
    run_id: run42
    runs_dir: "{{ playbook_dir }}/runs"
    command: [python, -m, trainops_train.train, --config, config/train.json]
    config: "{{ playbook_dir }}/../config/train.json"
    config_is_trainer: true
    env:
      OMP_NUM_THREADS: "8"
      HF_TOKEN: "{{ vault_hf_token }}"
    pod:
      id: "{{ pod.pod.id }}"
      gpu_type: NVIDIA H100 80GB HBM3
      gpu_count: 1
      data_center: EU-RO-1
      image: runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04
  delegate_to: localhost
  register: prov

- name: Push exactly the recorded files
  ansible.posix.synchronize:
    src: "{{ playbook_dir }}/../"
    dest: /workspace/trainops/run42/src/
    rsync_opts: ["--files-from={{ prov.run_dir }}/source.files"]
"""

RETURN = r"""
provenance:
  description: The record written to RV(path) (in check mode, the record that would be written).
  returned: always
  type: dict
  contains:
    format_version:
      description: Version of the record's layout.
      type: int
      sample: 1
    run_id:
      description: The run id.
      type: str
      sample: run42
    recorded_at:
      description: When the record was first written with this content (RFC 3339, UTC).
      type: str
      sample: "2026-12-03T00:15:02.123456+00:00"
    controller:
      description: The controller's host name.
      type: dict
      sample: {"hostname": "laptop"}
    tools:
      description: Versions of the collection, Python and git.
      type: dict
      sample: {"collection": "0.1.0", "python": "3.11.7", "git": "2.39.5"}
    source:
      description:
        - C(vcs) (V(git) or null), C(commit), C(branch) (null when detached), C(commit_time) (UTC),
          C(remote) (without credentials), C(toplevel), C(subdir), C(dirty) (null outside git),
          C(untracked), C(path), C(excluded), C(skipped), C(files) (path, type, sha256, size, mode or
          target), C(file_count), C(bytes), C(manifest), C(manifest_sha256) and C(archive) (path, sha256,
          bytes, format; null when not archived).
      type: dict
    command:
      description: C(argv), C(shell) (shell-quoted) and C(given) (the string as given, when it was one).
      type: dict
      sample: {"argv": ["python", "-m", "trainops_train.train"], "shell": "python -m trainops_train.train"}
    config:
      description: C(path), C(sha256), C(bytes) and C(trainer_config_hash) of the config; null without one.
      type: dict
    env:
      description: The environment overrides, secret-looking values replaced by V(<redacted>).
      type: dict
      sample: {"OMP_NUM_THREADS": "8", "HF_TOKEN": "<redacted>"}
    env_redacted:
      description: Names whose values were redacted.
      type: list
      elements: str
      sample: [HF_TOKEN]
    pod:
      description: The pod as given; null without one.
      type: dict
    venv:
      description: The requirements venv (requirements, key, python, venv_dir, freeze); null without one.
      type: dict
    result:
      description: The run's outcome; exit code null and status V(unknown) until the run's end is recorded.
      type: dict
      sample: {"exit_code": null, "status": "unknown"}
path:
  description: Path of provenance.json.
  returned: always
  type: str
  sample: /home/me/project/runs/run42/provenance.json
run_dir:
  description: The run's directory on the controller.
  returned: always
  type: str
  sample: /home/me/project/runs/run42
source_manifest_path:
  description: Path of source.sha256 (coreutils format, paths relative to O(src)).
  returned: always
  type: str
  sample: /home/me/project/runs/run42/source.sha256
file_list_path:
  description: Path of source.files (every recorded path, one a line, for C(rsync --files-from)).
  returned: always
  type: str
  sample: /home/me/project/runs/run42/source.files
archive_path:
  description: Path of source.tar when the source is archived; null otherwise.
  returned: always
  type: str
  sample: /home/me/project/runs/run42/source.tar
archive_sha256:
  description: sha256 of source.tar when the source is archived; null otherwise.
  returned: always
  type: str
  sample: 2e04e29bc87c8316470ad2352cdfda130e150a37531fdbdc65654459234a322a
files:
  description: Number of recorded files (and symbolic links).
  returned: always
  type: int
  sample: 152
bytes:
  description: Total size of the recorded regular files.
  returned: always
  type: int
  sample: 1040922
hash_stats:
  description: With O(hash_cache), how many regular files were read and how many hashes came from the cache.
  returned: when O(hash_cache) is true
  type: dict
  sample: {"read": 3, "cached": 3640}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.trainops.gpu.plugins.module_utils._provenance import (
    REDACTED,
    ProvenanceError,
    hash_cache_path,
    record,
    redact_env,
    validate_run_id,
)
from ansible_collections.trainops.gpu.plugins.module_utils._secrets import MIN_SCRUB_LENGTH, is_secret_name

ARGUMENT_SPEC = dict(
    src=dict(type="path", required=True),
    run_id=dict(type="str", required=True),
    runs_dir=dict(type="path", default="runs"),
    command=dict(type="raw", required=True),
    config=dict(type="path"),
    config_is_trainer=dict(type="bool", default=False),
    # no_log so that AnsibleModule never logs the values (syslog, journal); only the secret-looking ones stay
    # hidden from the output (see hide_secrets), the others are shown.
    env=dict(type="dict", default={}, no_log=True),
    pod=dict(
        type="dict",
        options=dict(
            id=dict(type="str"),
            gpu_type=dict(type="str"),
            gpu_count=dict(type="int"),
            data_center=dict(type="str"),
            image=dict(type="str"),
        ),
    ),
    venv=dict(type="dict"),
    archive=dict(type="str", choices=["auto", "always", "never"], default="auto"),
    hash_cache=dict(type="bool", default=True),
)


def hide_secrets(module):
    """The parameters as they may be shown: secret-looking env values replaced. Also narrows the values
    AnsibleModule strips from the output to the secret ones: a non-secret value such as "1" must not be
    masked inside every hash of the result (nor a short secret such as USE_AUTH=1: its value is redacted
    where it is recorded, but "1" is not hunted through the output)."""
    env = module.params.get("env") or {}
    shown = dict(module.params)
    shown["env"] = dict((name, REDACTED if is_secret_name(name) else value) for name, value in env.items())
    secrets = set(
        str(value)
        for name, value in env.items()
        if is_secret_name(name) and value is not None and len(str(value)) >= MIN_SCRUB_LENGTH
    )
    plain = set(str(value) for name, value in env.items() if not is_secret_name(name) and value is not None)
    module.no_log_values.difference_update(plain)
    module.no_log_values.update(secrets)
    return {"module_args": shown}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    invocation = hide_secrets(module)
    params = module.params
    try:
        validate_run_id(params["run_id"])
        redact_env(params["env"])
        git = module.get_bin_path("git") or "git"
        result = record(
            src=params["src"],
            run_id=params["run_id"],
            runs_dir=params["runs_dir"],
            command=params["command"],
            config=params["config"],
            config_is_trainer=params["config_is_trainer"],
            env=params["env"],
            pod=params["pod"],
            venv=params["venv"],
            archive=params["archive"],
            check_mode=module.check_mode,
            git=git,
            hash_cache=hash_cache_path(params["runs_dir"], params["src"]) if params["hash_cache"] else None,
        )
    except ProvenanceError as exc:
        module.fail_json(msg=str(exc), invocation=invocation)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot record provenance: %s" % exc, invocation=invocation)
    module.exit_json(invocation=invocation, **result)


if __name__ == "__main__":
    main()
