# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This file runs on target hosts through AnsiballZ (Python >= 3.8, standard library only): it keeps
# Python 3.8 idioms (% formatting, type comments) that ruff's py311 rules would rewrite; the collection's
# lint leaves those rules off, hence RUF100.
# ruff: noqa: UP004, UP009, UP031, RUF100
"""The one definition of a run's layout on the pod, its exit statuses and its result statuses.

Shared like the checkpoint format: it lives in the trainer's package (`from trainops_train import
run_layout`) and the collection's plugins/module_utils/_run_layout.py is a symlink to it, for the modules
and roles that start, watch and judge a run. Standard library only, Python >= 3.8, no torch: the trainer
imports it before torch (signals.py, train.py).

    <durable>/cache/                       shared between runs (downloads, compiled kernels)
    <durable>/trainops/<run_id>/           a run directory (locally: runs/<run_id>, or --run-dir)
        src/                               the synced source the run executes
        ckpt/                              the checkpoint root: its entries (step-N/, latest, .writer.lock)
                                           are the checkpoint format's (checkpoint_format.py)
        logs/metrics.jsonl                 one line per step (rank 0)
        logs/events.jsonl                  what the trainer did and when
        logs/result.json                   how the last life ended (status, exit_code, step, reason, ...)
        job/<name>/                        one started job: pid, output.log, exit_code, started_at,
                                           ended_at, telemetry.jsonl

Exit statuses of `python -m trainops_train.train` (each rank, under torchrun) and the `status` that
result.json records for them: 0 finished, 75 interrupted (EX_TEMPFAIL, run again to resume), 2 refused
(bad config or arguments, resume refused, run locked: nothing was trained), 1 failed (anything else).
"""

from __future__ import annotations

import os
import re

TRAINOPS_DIRNAME = "trainops"
CACHE_DIRNAME = "cache"

# A run directory's entries.
SRC_DIRNAME = "src"
CKPT_DIRNAME = "ckpt"
LOGS_DIRNAME = "logs"
JOB_DIRNAME = "job"
METRICS_NAME = "metrics.jsonl"
EVENTS_NAME = "events.jsonl"
RESULT_NAME = "result.json"

# A job directory's files.
JOB_PID_NAME = "pid"
JOB_OUTPUT_NAME = "output.log"
JOB_EXIT_CODE_NAME = "exit_code"
JOB_STARTED_AT_NAME = "started_at"
JOB_ENDED_AT_NAME = "ended_at"
JOB_TELEMETRY_NAME = "telemetry.jsonl"
JOB_FILE_NAMES = (
    JOB_PID_NAME,
    JOB_OUTPUT_NAME,
    JOB_EXIT_CODE_NAME,
    JOB_STARTED_AT_NAME,
    JOB_ENDED_AT_NAME,
    JOB_TELEMETRY_NAME,
)

EXIT_FINISHED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2  # bad config or arguments, resume refused, run directory locked: nothing was trained
EXIT_INTERRUPTED = 75  # EX_TEMPFAIL: stopped by SIGTERM/SIGINT after writing a checkpoint; run again to resume

STATUS_FINISHED = "finished"
STATUS_FAILED = "failed"
STATUS_REFUSED = "refused"
STATUS_INTERRUPTED = "interrupted"
STATUS_BY_EXIT = {
    EXIT_FINISHED: STATUS_FINISHED,
    EXIT_FAILED: STATUS_FAILED,
    EXIT_USAGE: STATUS_REFUSED,
    EXIT_INTERRUPTED: STATUS_INTERRUPTED,
}


def status_for_exit(exit_code):
    # type: (int) -> str
    """result.json's status for an exit status; any status not listed is a failure."""
    return STATUS_BY_EXIT.get(exit_code, STATUS_FAILED)


# A run id is one path component of safe characters: it names runs/<run_id>/, <durable>/trainops/<run_id>/ and
# pods (<prefix>-<run_id>-<role>). ``\Z``, not ``$``: "run1\n" is not a run id.
RUN_ID_MAX_LENGTH = 128
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def run_id_problem(run_id, max_length=RUN_ID_MAX_LENGTH, name="run_id"):
    # type: (object, int, str) -> str
    """'' for a valid run id of at most ``max_length`` characters, else a sentence naming what is wrong.

    The one rule for run ids: the trainer, the provenance and run_state modules and every role and playbook
    (through the ``trainops.gpu.run_id_problem`` filter) use it. A caller that derives longer names from the
    id (a pod name, a drill mode's run id) passes a smaller ``max_length``."""
    rule = '1-%d letters, digits, ".", "_" or "-", starting with a letter or digit' % max_length
    if not isinstance(run_id, str):
        return "%s must be a string of %s, got %s %r" % (name, rule, type(run_id).__name__, run_id)
    if not _RUN_ID_RE.match(run_id) or len(run_id) > max_length:
        return "%s %r must be %s" % (name, run_id, rule)
    return ""


def _single_name(kind, name):
    # type: (str, str) -> str
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValueError("%s must be a non-empty name without '/', got %r" % (kind, name))
    return name


def cache_dir(durable_root):
    # type: (str) -> str
    """The cache shared by every run on one durable volume."""
    return os.path.join(durable_root, CACHE_DIRNAME)


class RunLayout(object):
    """Where one run keeps its files. RunLayout.for_run(durable_root, run_id) on a pod, or
    RunLayout.from_run_dir(run_dir) for any run directory (a local run's runs/<run_id>, --run-dir)."""

    __slots__ = ("run_dir",)

    def __init__(self, run_dir):
        # type: (str) -> None
        self.run_dir = run_dir

    @classmethod
    def for_run(cls, durable_root, run_id):
        # type: (str, str) -> RunLayout
        return cls(os.path.join(durable_root, TRAINOPS_DIRNAME, _single_name("run_id", run_id)))

    @classmethod
    def from_run_dir(cls, run_dir):
        # type: (str) -> RunLayout
        return cls(run_dir)

    def __eq__(self, other):
        # type: (object) -> bool
        return isinstance(other, RunLayout) and other.run_dir == self.run_dir

    def __hash__(self):
        # type: () -> int
        return hash(self.run_dir)

    def __repr__(self):
        # type: () -> str
        return "RunLayout(%r)" % (self.run_dir,)

    @property
    def src(self):
        # type: () -> str
        return os.path.join(self.run_dir, SRC_DIRNAME)

    @property
    def ckpt(self):
        # type: () -> str
        return os.path.join(self.run_dir, CKPT_DIRNAME)

    @property
    def logs(self):
        # type: () -> str
        return os.path.join(self.run_dir, LOGS_DIRNAME)

    @property
    def metrics(self):
        # type: () -> str
        return os.path.join(self.logs, METRICS_NAME)

    @property
    def events(self):
        # type: () -> str
        return os.path.join(self.logs, EVENTS_NAME)

    @property
    def result(self):
        # type: () -> str
        return os.path.join(self.logs, RESULT_NAME)

    @property
    def jobs(self):
        # type: () -> str
        return os.path.join(self.run_dir, JOB_DIRNAME)

    def job_dir(self, name):
        # type: (str) -> str
        return os.path.join(self.jobs, _single_name("job name", name))

    def job_file(self, name, file_name):
        # type: (str, str) -> str
        """One of a job's files (JOB_*_NAME)."""
        if file_name not in JOB_FILE_NAMES:
            raise ValueError("%r is not a job file (one of %s)" % (file_name, ", ".join(JOB_FILE_NAMES)))
        return os.path.join(self.job_dir(name), file_name)
