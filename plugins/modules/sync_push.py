# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# The work is done by the action plugin of the same name (plugins/action/sync_push.py), on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sync_push
short_description: Record a run's source, rsync exactly those files to a pod and verify them there
version_added: 0.1.0
description:
  - The push half of the C(trainops.gpu.sync) role, in one task. Runs on the controller (an action plugin) and
    reaches the pod with C(ssh) and C(rsync) over one SSH connection (a master connection with a private control
    socket, closed at the end).
  - Records the source as M(trainops.gpu.provenance) does (same record, files and hash cache) in
    C(<runs_dir>/<run_id>/), while the SSH connection is being opened.
  - Runs C(rsync --archive --relative) of exactly the recorded paths (those of C(<runs_dir>/<run_id>/source.files),
    given as arguments) into C(<dest>/src/) (made when missing), through that connection. rsync's quick check
    (size and mtime) sends no file content for an unchanged tree. Nothing on the pod is deleted.
  - Sends the manifest C(source.sha256) to the pod, keeps it as C(<dest>/source.sha256), and checks every listed
    file under C(<dest>/src/) with the pod's Python (standard library only); each must be a regular file with the
    listed sha256. Fails naming the files that are missing, not regular files or different.
  - With O(verify=cached) the pod reads only the files whose size, mtime, ctime, inode or device changed since its
    last check (hashes kept in C(<dest>/.source.verify.json)); a write on the pod always changes the ctime, so a
    file edited there is read again even with its size and mtime restored.
author:
  - trainops.gpu maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details:
      - In check mode the provenance is computed and not written, rsync runs with C(--dry-run) (RV(itemized) and
        C(changed) say what would move), and nothing is checked on the pod.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  src:
    description: The controller's source directory (a git work tree or any directory).
    type: path
    required: true
  run_id:
    description: The run's id (1 to 128 letters, digits, C(.), C(_) or C(-), starting with a letter or digit).
    type: str
    required: true
  runs_dir:
    description: Where run directories live on the controller; the record goes to C(<runs_dir>/<run_id>/).
    type: path
    required: true
  dest:
    description: The run directory on the pod (absolute); the source goes to C(<dest>/src/).
    type: str
    required: true
  remote:
    description: The pod as rsync names it, C(user@host) (an IPv6 address in brackets).
    type: str
    required: true
  rsh:
    description:
      - The ssh command that reaches the pod, as rsync's C(--rsh) takes it (split on spaces, honouring quotes),
        for example C(ssh -p 10022 -i ~/.ssh/pod -o BatchMode=yes). The connection options of this module go
        before these (ssh takes the first value of an option).
    type: str
    required: true
  command:
    description: The training command recorded (M(trainops.gpu.provenance)'s O(trainops.gpu.provenance#module:command)).
    type: raw
    default: [python, -m, trainops_train.train]
  venv:
    description: M(trainops.gpu.provenance)'s O(trainops.gpu.provenance#module:venv) (bootstrap_result.venv).
    type: dict
  archive:
    description: M(trainops.gpu.provenance)'s O(trainops.gpu.provenance#module:archive).
    type: str
    choices: [auto, always, never]
    default: auto
  hash_cache:
    description: M(trainops.gpu.provenance)'s O(trainops.gpu.provenance#module:hash_cache).
    type: bool
    default: true
  verify:
    description:
      - V(cached) reads on the pod only the files whose identity changed since the last check; V(full) reads every
        file and rewrites the pod's cache.
    type: str
    choices: [cached, full]
    default: cached
  python:
    description: The pod's Python (3.8 or later) that checks the files. A value starting with V(auto) means V(python3).
    type: str
    default: python3
  rsync_timeout:
    description: rsync's C(--timeout), seconds without I/O before it gives up.
    type: int
    default: 300
  verify_timeout:
    description: Seconds the check on the pod may take.
    type: int
    default: 600
  connect_timeout:
    description: Seconds the SSH connection may take to open (the C(rsh)'s own C(ConnectTimeout) applies too).
    type: int
    default: 60
seealso:
  - module: trainops.gpu.provenance
  - name: The sync role
    description: Push, pull, the lock and the benchmark (docs/sync.md).
    link: https://example.invalid/trainops/gpu/docs/sync.md
"""

EXAMPLES = r"""
- name: Push the recorded source of run42 to the pod and verify it there
  trainops.gpu.sync_push:
    src: "{{ playbook_dir }}/.."
    run_id: run42
    runs_dir: "{{ playbook_dir }}/../runs"
    dest: /workspace/trainops/run42
    remote: "root@{{ ansible_host }}"
    rsh: "ssh -p {{ ansible_port }} -i {{ ansible_ssh_private_key_file }} -o BatchMode=yes"
"""

RETURN = r"""
files:
  description: Recorded paths (regular files and links).
  returned: always
  type: int
bytes:
  description: Total size of the recorded regular files.
  returned: always
  type: int
files_transferred:
  description: rsync's C(Number of regular files transferred) (would be, in check mode).
  returned: always
  type: int
bytes_transferred:
  description: rsync's C(Total transferred file size).
  returned: always
  type: int
itemized:
  description: rsync's C(--itemize-changes) lines of what moved (files sent, links and directories made), the first 100.
  returned: always
  type: list
  elements: str
files_verified:
  description: Regular files checked on the pod (null in check mode).
  returned: always
  type: int
files_hashed_on_pod:
  description: Of those, the files read this time (the others matched the pod's cache).
  returned: always
  type: int
verified:
  description: Every recorded regular file matched on the pod (false only in check mode; a mismatch fails).
  returned: always
  type: bool
manifest_sha256:
  description: sha256 of C(source.sha256), one identity for the pushed tree.
  returned: always
  type: str
commit:
  description: The source's git commit (null outside git).
  returned: always
  type: str
dirty:
  description: Whether the git tree had changes or untracked files (null outside git).
  returned: always
  type: bool
provenance_path:
  description: The controller's C(provenance.json).
  returned: always
  type: str
provenance_changed:
  description: Whether the provenance record changed.
  returned: always
  type: bool
hash_stats:
  description: Controller files read and hashes taken from the cache (null without O(hash_cache)).
  returned: always
  type: dict
dest:
  description: The pod's C(src/) directory.
  returned: always
  type: str
timings:
  description:
    - Seconds spent in C(provenance_s) (recording, while the connection opens), C(connect_wait_s) (waiting for the
      connection after that), C(rsync_s), C(verify_s), C(total_s).
  returned: always
  type: dict
"""
