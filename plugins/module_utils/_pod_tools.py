# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The programs the collection's roles run on a pod, and what to do when one is missing (module pod_tools).

Pure decisions (which requirement is unmet, whether and how apt can install it, the failure's words) are
functions of what was found, so they are tested without a pod; :func:`setsid_works` and :func:`run_bounded`
are the only parts that touch the system.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

# Each requirement is met by any of its programs on the PATH (the detach requirement also by setsid(2));
# `package` is the Debian/Ubuntu package that provides the first program.
REQUIREMENTS = (
    {
        "name": "rsync",
        "programs": ("rsync",),
        "package": "rsync",
        "needed_by": "the sync role (rsync runs on both ends of every push and pull)",
        "setsid_will_do": False,
    },
    {
        "name": "python3",
        "programs": ("python3",),
        "package": "python3",
        "needed_by": "Ansible's modules, the job module's supervisor and the trainer",
        "setsid_will_do": False,
    },
    {
        "name": "tmux",
        "programs": ("tmux",),
        "package": "tmux",
        "needed_by": "the job module, to detach a job (tmux, else a new session by setsid)",
        "setsid_will_do": True,
    },
)
PROGRAMS = tuple(sorted({program for req in REQUIREMENTS for program in req["programs"]}))
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C", "APT_LISTCHANGES_FRONTEND": "none"}
# What to do when a program cannot be installed by bootstrap; {packages} is filled in.
IMAGE_ADVICE = (
    "use an image that has it (for example add `apt-get install -y --no-install-recommends {packages}` to its "
    "Dockerfile; RunPod's runpod/pytorch images have openssh-server but no rsync) or install it on the pod"
)


def unmet(found, setsid):
    """The requirements not met, given ``found`` ({program: path or None}) and whether setsid(2) works."""
    missing = []
    for req in REQUIREMENTS:
        if any(found.get(program) for program in req["programs"]):
            continue
        if req["setsid_will_do"] and setsid:
            continue
        missing.append(req)
    return missing


def describe(requirements):
    """``rsync (needed by ...)`` for each requirement, joined."""
    return "; ".join("%s (needed by %s)" % (req["name"], req["needed_by"]) for req in requirements)


def packages_of(requirements):
    return [req["package"] for req in requirements]


def refusal(install_missing, apt_get, is_root):
    """Why missing programs cannot be installed here (a phrase), or None when apt can try."""
    if not install_missing:
        return "installing is turned off (install_missing=false, the bootstrap role's bootstrap_install_missing)"
    if not apt_get:
        return "the pod has no apt-get to install it with"
    if not is_root:
        return "installing with apt needs root, and the SSH user is not root"
    return None


def parse_candidates(policy_output, packages):
    """{package: candidate version or None} from ``apt-cache policy <packages>`` (LC_ALL=C)."""
    found = dict((package, None) for package in packages)
    current = None
    for line in policy_output.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            name = line[:-1].split(":", 1)[0]
            current = name if name in found else None
        elif current and line.strip().startswith("Candidate:"):
            version = line.split(":", 1)[1].strip()
            found[current] = None if version in ("", "(none)") else version
    return found


def without_candidate(candidates):
    return sorted(package for package, version in candidates.items() if version is None)


def install_command(packages, lock_timeout):
    """The one apt-get install the role runs: no recommends, no prompt, bounded wait for dpkg's lock."""
    lock = "DPkg::Lock::Timeout=%d" % max(1, int(lock_timeout))
    return ["apt-get", "install", "-y", "--no-install-recommends", "-o", lock, *packages]


def failure_message(requirements, reason, install_missing=True):
    """The failure: which programs are missing, what needs them, why they are not installed, what to do."""
    names = ", ".join(req["name"] for req in requirements)
    advice = IMAGE_ADVICE.format(packages=" ".join(packages_of(requirements)))
    if not install_missing:
        advice += ", or let bootstrap install it with apt (bootstrap_install_missing: true)"
    return "missing on the pod: %s; %s cannot be installed: %s. To fix: %s" % (
        describe(requirements),
        names,
        reason,
        advice,
    )


def apt_errors(output, limit=600):
    """apt's error lines (``Err:`` with the reason under it, ``E:``, ``W:``), else the end of its output."""
    picked, after_err = [], False
    for line in (output or "").splitlines():
        if line.startswith(("E:", "W:", "Err:")) or (after_err and line.startswith(" ")):
            picked.append(line.strip())
        after_err = line.startswith("Err:") or (after_err and line.startswith(" "))
    return tail(" / ".join(picked), limit) if picked else tail(output, limit)


def tail(text, limit=600):
    text = (text or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def setsid_works(timeout=30):
    """Whether a child can start its own session with setsid(2): the job module's fallback without tmux."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getsid(0) == os.getpid())"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip() == "True"


def run_bounded(argv, deadline, env=None, grace=10.0, clock=time.monotonic):
    """Run argv in its own process group until ``deadline`` (a ``clock`` time): (rc, output, timed_out).

    On timeout the group gets SIGTERM, then SIGKILL after ``grace`` seconds; rc is then None.
    """
    remaining = deadline - clock()
    if remaining <= 0:
        return None, "", True
    try:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=dict(os.environ, **(env or {})),
            start_new_session=True,
        )
    except OSError as exc:
        return 127, str(exc), False
    try:
        output, _unused = process.communicate(timeout=remaining)
        return process.returncode, output, False
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(OSError):
                os.killpg(process.pid, sig)
            try:
                output, _unused = process.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                output = ""
        return None, output, True
