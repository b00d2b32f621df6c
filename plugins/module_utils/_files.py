# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller through AnsiballZ or in an action plugin (Python >= 3.8, standard library only): it
# keeps Python 3.8 idioms (% formatting, type comments) that ruff's py311 rules would rewrite.
# ruff: noqa: UP004, UP009, UP031, RUF100
"""The file primitives the module_utils share: an atomic write, a directory fsync and the run-id check.

Small on purpose: a module that only writes a file atomically (run_state, run_lock) carries this and
_run_layout, not the provenance code. Not used by the files that cannot import the collection:
_source_verify.py runs on the pod as ``python3 -c`` text, _checkpoint_format.py and _run_layout.py are the
training package's files (symlinks).

- ``atomic_write(path, writer)`` writes through ``writer(binary file)`` into ``.<name>.<random>.tmp``
  beside ``path``, fsyncs it, gives it the mode a plain ``open`` would (0o666 less the umask), renames it
  over ``path`` and fsyncs the directory; the temporary file is removed when anything fails.
- ``atomic_write_unless(path, writer, unchanged)`` does the same but keeps ``path`` as it is when
  ``unchanged(writer's result)`` says it already holds that.
- ``validate_run_id(run_id, error)`` applies the one run-id rule (``_run_layout.run_id_problem``) and raises
  the caller's error type.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

from ansible_collections.trainops.gpu.plugins.module_utils._run_layout import run_id_problem


def validate_run_id(run_id, error=ValueError):
    # type: (object, type) -> str
    """The run id when it follows the run-id rule (_run_layout.run_id_problem); else ``error(message)``."""
    problem = run_id_problem(run_id)
    if problem:
        raise error(problem + " (no path separators)")
    return run_id


def umask():
    # type: () -> int
    """The process's umask (reading it means setting it: set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(path):
    # type: (str) -> None
    """Make a rename into ``path`` durable, where the file system lets a directory be opened and fsynced."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_unless(path, writer, unchanged=None):
    # type: (str, object, object) -> tuple
    """(writer's result, replaced): write ``path`` through ``writer(binary file)`` into a temporary file beside
    it, fsync, rename, fsync the directory. When ``unchanged(result)`` says the file already holds that, the
    temporary file is dropped instead and ``path`` is left as it is."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            result = writer(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if unchanged is not None and unchanged(result):
            os.unlink(tmp)
            return result, False
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)
    return result, True


def atomic_write(path, writer):
    # type: (str, object) -> object
    """Write ``path`` through ``writer(binary file)`` into a temporary file beside it, fsync, rename, fsync
    the directory. Returns what the writer returned."""
    return atomic_write_unless(path, writer)[0]
