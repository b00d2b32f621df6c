# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This file runs on target hosts through AnsiballZ (Python >= 3.8, standard library only).
# ruff: noqa: UP031, RUF100
"""A run's requirements in a venv on the durable root, keyed by the file and the pod's Python.

    <cache>/venvs/<key>/                 key: sha256 of the requirements' bytes and the Python's identity
        bin/python                       --system-site-packages: the image's torch is seen, never replaced
        .trainops-venv.json              written last (atomically): the venv is complete only with it
    <cache>/venvs/.<key>.lock            flock held while one builder works on the key

A venv is built in place (its scripts' shebangs and bin/activate name its own path, so a venv renamed after
the build would be broken) under the key's lock; the marker file, committed last, is what makes it usable. A
directory without the marker is what a killed build left: it is removed and built again, never used.
Before anything is installed, `pip install --dry-run --report` says what would be: a requirement that would
install torch (named in the file, or pulled in by another) is refused, naming it and what asked for it.
"""

from __future__ import annotations

import hashlib
import json
import re

MARKER_NAME = ".trainops-venv.json"
KEY_HEX = 16
# Packages a requirements venv never installs over the image's own (CUDA builds on RunPod).
REFUSED = ("torch",)
# pip's options that may appear in a requirements file and name no package
_OPTION_RE = re.compile(r"^\s*-")
_NAME_RE = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def normalize(name):
    # type: (str) -> str
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def venv_key(requirements, python_identity, pip_args=()):
    # type: (bytes, str, tuple | list) -> str
    """The venv's directory name: the requirements' bytes, the Python that runs them (with its torch) and
    pip's arguments (another index or wheel directory resolves differently)."""
    digest = hashlib.sha256()
    digest.update(b"requirements\0%d\0" % len(requirements))
    digest.update(requirements)
    digest.update(b"\0python\0" + python_identity.encode("utf-8"))
    digest.update(b"\0pip\0" + json.dumps(list(pip_args)).encode("utf-8"))
    return digest.hexdigest()[:KEY_HEX]


# Lines pip would resolve relative to the file, which the module does not keep where it was: refused.
_NESTED_RE = re.compile(r"^\s*(-r|-c|--requirement|--constraint)(\s|=|$)")
# pip's --dry-run and --report, which the refusal reads, came with pip 22.2.
PIP_MIN = (22, 2)


def unsupported_lines(text, label):
    # type: (str, str) -> list[str]
    """Lines naming another file (-r, -c): the requirements reach the pod as one text, without its neighbours."""
    return [
        "%s line %d names another file (%s): give one self-contained requirements file" % (label, n, line.strip())
        for n, line in enumerate(text.splitlines(), 1)
        if _NESTED_RE.match(line)
    ]


def pip_version(text):
    # type: (str) -> tuple[int, ...] | None
    """(major, minor) from `pip --version`'s output, or None."""
    match = re.match(r"^pip (\d+)\.(\d+)", text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def requirement_names(text):
    # type: (str) -> list[tuple[int, str]]
    """(line number, normalized name) of each requirement line (options, comments and blank lines skipped)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#") or _OPTION_RE.match(line):
            continue
        match = _NAME_RE.match(line)
        if match:
            found.append((number, normalize(match.group(1))))
    return found


def refused_in_file(text, label, refused=REFUSED):
    # type: (str, str, tuple) -> list[str]
    """A requirement line that names a refused package, each as a sentence."""
    wanted = set(normalize(name) for name in refused)
    return [
        "%s line %d asks for %s: the image's own %s is used (the venv sees it), never replaced" % (label, n, name, name)
        for n, name in requirement_names(text)
        if name in wanted
    ]


def refused_in_report(report, refused=REFUSED):
    # type: (dict, tuple) -> list[str]
    """What pip's --dry-run --report would install of the refused packages, each as a sentence naming what
    asked for it (the requested requirements that depend on it)."""
    wanted = set(normalize(name) for name in refused)
    installs = [item for item in (report or {}).get("install") or [] if isinstance(item, dict)]
    problems = []
    for item in installs:
        metadata = item.get("metadata") or {}
        name = normalize(str(metadata.get("name", "")))
        if name not in wanted:
            continue
        askers = []
        for other in installs:
            other_meta = other.get("metadata") or {}
            matches = [_NAME_RE.match(r) for r in other_meta.get("requires_dist") or [] if isinstance(r, str)]
            if name in [normalize(match.group(1)) for match in matches if match]:
                askers.append("%s %s" % (other_meta.get("name"), other_meta.get("version")))
        why = ("required by " + ", ".join(sorted(askers))) if askers else "asked for directly"
        problems.append(
            "installing the requirements would install %s %s (%s): the image's own %s is used, never replaced"
            % (metadata.get("name"), metadata.get("version"), why, name)
        )
    return problems


def installed_in_report(report):
    # type: (dict) -> list[str]
    """name==version of everything pip's --dry-run --report would install, sorted."""
    items = [item.get("metadata") or {} for item in (report or {}).get("install") or [] if isinstance(item, dict)]
    return sorted("%s==%s" % (meta.get("name"), meta.get("version")) for meta in items)


def read_marker(text):
    # type: (str) -> dict | None
    """The marker's record when it parses as the builder wrote it, else None (then the venv is not complete)."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        return None
    if not isinstance(record.get("freeze"), list):
        return None
    return record
