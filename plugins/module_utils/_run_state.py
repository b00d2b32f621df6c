# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller through AnsiballZ (Python >= 3.8, standard library only).
# ruff: noqa: UP004, UP009, UP031, RUF100
"""``runs/<run_id>/state.json``: everything a run created or used, recorded the moment it exists.

One format and one writer for every playbook (bench, drill, teardown) and for the modules' ``record_to``;
the audit reads these files to tell the runs' resources from orphans. The document::

    {"format_version": 1, "run_id": ..., "api_url": ..., "started_at": ..., "updated_at": ...,
     "resources": [{"kind": "pod", "id": ..., "name": ..., "role": ..., "action": "created",
                    "status": ..., "recorded_at": ..., "updated_at": ...,
                    "final": {"status": ..., "read_at": ..., "source": "api"}, ...}, ...]}

- ``record(state_file, run_id, resources, run)`` upserts resources by ``(kind, id)``: fields are merged
  (dicts recursively, anything else replaced), the first ``recorded_at`` is kept, ``updated_at`` is set
  when a field changed; ``run`` fields are merged into the top level. An ``action`` of ``created`` is never
  replaced: a resource this run created stays the run's to clean up.
- Every write is atomic (temporary file, fsync, rename, directory fsync) under an exclusive ``flock`` on
  ``state.json.lock``, so concurrent writers (two modules of one play, forks) lose nothing and a reader
  never sees a torn file. Nothing is written when nothing changed.
- Keys that look like secrets (api_key, token, secret, password, credential, private_key) are refused
  anywhere in the record: the file is evidence, and evidence is copied around.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import errno
import fcntl
import json
import os
import re
import signal
import time

from ansible_collections.trainops.gpu.plugins.module_utils._files import atomic_write, validate_run_id
from ansible_collections.trainops.gpu.plugins.module_utils._run_layout import run_id_problem

FORMAT_VERSION = 1
STATE_NAME = "state.json"
LOCK_SUFFIX = ".lock"
# Top-level keys the writer owns; ``run`` may not set them.
OWNED_KEYS = ("format_version", "run_id", "updated_at", "resources")
# Per-resource keys the writer owns.
RESOURCE_OWNED_KEYS = ("recorded_at", "updated_at")
ACTION_CREATED = "created"
DEFAULT_LOCK_TIMEOUT_S = 30.0
LOCK_POLL_S = 0.02

# Narrower than provenance's env markers (which also take KEY, AUTH, PRIVATE): resource fields such as
# ``ssh_key`` or ``public_key`` are not secrets, while anything named like a credential is.
SECRET_KEY = re.compile(
    r"(api[_-]?key|access[_-]?key|private[_-]?key|secret|token(?!s)|passw(or)?d|credential|auth[_-]?key|bearer)",
    re.IGNORECASE,
)


class RunStateError(Exception):
    """The state file cannot be read or written, or a record is refused; the message says what and where."""


def utc_now():
    # type: () -> str
    """UTC time as bench.yml always wrote it: 2026-12-03T05:41:07Z."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def state_path(runs_dir, run_id):
    # type: (str, str) -> str
    """``<runs_dir>/<run_id>/state.json``, the run id checked to be a single safe name."""
    return os.path.join(runs_dir, check_run_id(run_id), STATE_NAME)


def check_run_id(run_id):
    # type: (object) -> str
    return validate_run_id(run_id, RunStateError)


def secret_keys(value, where=""):
    # type: (object, str) -> list
    """Paths (``resources[0].final.token``) of every key in a JSON-like value whose name looks secret."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            here = "%s.%s" % (where, key) if where else str(key)
            if SECRET_KEY.search(str(key)):
                found.append(here)
            found.extend(secret_keys(item, here))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found.extend(secret_keys(item, "%s[%d]" % (where, index)))
    return found


def secret_values(value, inside=False):
    # type: (object, bool) -> set
    """Every scalar under a secret-looking key of a JSON-like value, as text: a module adds them to its
    ``no_log_values`` so that a refused record does not show them in its output (module_args)."""
    found = set()
    if isinstance(value, dict):
        for key, item in value.items():
            found |= secret_values(item, inside or bool(SECRET_KEY.search(str(key))))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found |= secret_values(item, inside)
    elif inside and value is not None and not isinstance(value, bool) and str(value):
        found.add(str(value))
    return found


def check_inputs(run_id, resources, run):
    # type: (str, list, dict) -> tuple
    """(resources as a list of dicts, run as a dict), each checked; RunStateError naming every problem."""
    check_run_id(run_id)
    problems = []
    resources = list(resources or ())
    run = dict(run or {})
    for index, resource in enumerate(resources):
        if not isinstance(resource, dict):
            problems.append("resources[%d] must be a dict, got %s" % (index, type(resource).__name__))
            continue
        for key in ("kind", "id"):
            if not isinstance(resource.get(key), str) or not resource.get(key):
                problems.append("resources[%d] needs %s, a non-empty string, got %r" % (index, key, resource.get(key)))
    owned = sorted(k for k in run if k in OWNED_KEYS and not (k == "run_id" and run[k] == run_id))
    if owned:
        problems.append("run must not set %s (the writer owns them)" % ", ".join(owned))
    secrets = secret_keys({"resources": resources, "run": run})
    if secrets:
        problems.append("keys that look like secrets are never recorded: %s" % ", ".join(secrets))
    try:
        json.dumps({"resources": resources, "run": run}, allow_nan=False)
    except (TypeError, ValueError) as exc:
        problems.append("the record is not JSON: %s" % exc)
    if problems:
        raise RunStateError("cannot record in state.json of run %s: %s" % (run_id, "; ".join(problems)))
    return resources, run


def new_document(run_id, now):
    # type: (str, str) -> dict
    return {"format_version": FORMAT_VERSION, "run_id": run_id, "started_at": now, "updated_at": now, "resources": []}


def check_document(document, state_file, run_id=None):
    # type: (object, str, str) -> dict
    """The document when it is a state.json of this format (and of ``run_id`` when given)."""
    if not isinstance(document, dict) or not isinstance(document.get("resources"), list):
        raise RunStateError("%s is not a run state document (no resources list)" % state_file)
    if document.get("format_version") != FORMAT_VERSION:
        raise RunStateError(
            "%s has format_version %r; this writer knows %d only" % (state_file, document.get("format_version"), 1)
        )
    if run_id is not None and document.get("run_id") != run_id:
        raise RunStateError(
            "%s belongs to run %r, not %r: one state file per run" % (state_file, document.get("run_id"), run_id)
        )
    return document


def load(state_file, run_id=None):
    # type: (str, str) -> dict | None
    """The document in ``state_file``, None when it does not exist; RunStateError when it is not one."""
    try:
        with open(state_file, "rb") as handle:
            data = handle.read()
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise RunStateError("cannot read %s: %s" % (state_file, exc.strerror or exc)) from None
    try:
        document = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        # Never overwrite a file that may hold the only record of a billing pod.
        raise RunStateError("%s is not valid JSON (%s); move it aside to start a new one" % (state_file, exc)) from None
    return check_document(document, state_file, run_id)


def merge_fields(old, new):
    # type: (dict, dict) -> dict
    """``old`` updated with ``new``: dicts merged recursively, anything else replaced."""
    merged = copy.deepcopy(old)
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_fields(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def upsert(resources, resource, now):
    # type: (list, dict, str) -> bool
    """Insert or update ``resource`` in ``resources`` (in place) by (kind, id); True when something changed."""
    fields = dict((k, v) for k, v in resource.items() if k not in RESOURCE_OWNED_KEYS)
    for index, existing in enumerate(resources):
        if existing.get("kind") == fields["kind"] and existing.get("id") == fields["id"]:
            if existing.get("action") == ACTION_CREATED:
                fields.pop("action", None)
            merged = merge_fields(existing, fields)
            if merged == existing:
                return False
            merged["updated_at"] = now
            merged.setdefault("recorded_at", now)
            resources[index] = merged
            return True
    added = copy.deepcopy(fields)
    added["recorded_at"] = now
    added["updated_at"] = now
    resources.append(added)
    return True


def merged_document(document, run_id, resources=(), run=None, now=None, run_defaults=None):
    # type: (dict | None, str, list, dict, str, dict) -> tuple
    """(new document, changed): ``document`` (None: a new one) with the record applied; ``run_defaults`` are
    top-level fields set only where the document has none. Pure."""
    resources, run = check_inputs(run_id, resources, run)
    defaults = check_inputs(run_id, (), run_defaults)[1]
    now = now or utc_now()
    result = new_document(run_id, now) if document is None else copy.deepcopy(document)
    changed = document is None
    for key, value in defaults.items():
        if key != "run_id" and key not in run and result.get(key) is None and value is not None:
            result[key] = copy.deepcopy(value)
            changed = True
    run.pop("run_id", None)
    for key, value in run.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            value = merge_fields(result[key], value)
        if result.get(key) != value:
            result[key] = copy.deepcopy(value)
            changed = True
    for resource in resources:
        changed = upsert(result["resources"], resource, now) or changed
    if changed:
        result["updated_at"] = now
    return result, changed


def document_text(document):
    # type: (dict) -> str
    return json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n"


class StateLock(object):
    """An exclusive flock on ``<state_file>.lock``, waited for at most ``timeout_s`` seconds."""

    def __init__(self, state_file, timeout_s=DEFAULT_LOCK_TIMEOUT_S):
        self.path = state_file + LOCK_SUFFIX
        self.timeout_s = timeout_s
        self.fd = None

    def __enter__(self):
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunStateError("cannot open the lock %s: %s" % (self.path, exc.strerror or exc)) from None
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    self._close()
                    raise RunStateError("cannot lock %s: %s" % (self.path, exc.strerror or exc)) from None
            if time.monotonic() >= deadline:
                self._close()
                raise RunStateError(
                    "%s stayed locked for %.0f s by another writer; nothing was recorded" % (self.path, self.timeout_s)
                )
            time.sleep(LOCK_POLL_S)

    def _close(self):
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None

    def __exit__(self, *exc_info):
        self._close()
        return False


def ensure_directory(state_file):
    # type: (str) -> None
    directory = os.path.dirname(os.path.abspath(state_file))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise RunStateError("cannot create the run directory %s: %s" % (directory, exc.strerror or exc)) from None


def preflight(state_file, run_id):
    # type: (str, str) -> dict | None
    """Check, before anything is created, that ``state_file`` can take this run's records: a valid run id, not
    a directory, an existing file of this format and run, a writable (or creatable) directory. Returns the
    current document (None when there is none yet). Writes nothing."""
    check_run_id(run_id)
    if os.path.isdir(state_file):
        raise RunStateError("%s is a directory, not a state file" % state_file)
    document = load(state_file, run_id)
    directory = os.path.dirname(os.path.abspath(state_file))
    probe = directory
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
        raise RunStateError("cannot write %s: %s is not a writable directory" % (state_file, probe))
    return document


def record(
    state_file,
    run_id,
    resources=(),
    run=None,
    lock_timeout_s=DEFAULT_LOCK_TIMEOUT_S,
    check_mode=False,
    run_defaults=None,
):
    # type: (str, str, list, dict, float, bool, dict) -> tuple
    """Upsert ``resources`` and merge ``run`` into ``state_file``; returns (document, changed).

    Under the lock: read, merge, write atomically only when something changed. ``run_defaults``: top-level
    fields set only when the document has none (a module's api_url). ``check_mode``: the same without the
    lock and without writing (the document is what would be written)."""
    check_inputs(run_id, resources, run)
    check_inputs(run_id, (), run_defaults)
    if check_mode:
        document = load(state_file, run_id)
        return merged_document(document, run_id, resources, run, run_defaults=run_defaults)
    ensure_directory(state_file)
    with StateLock(state_file, lock_timeout_s):
        document = load(state_file, run_id)
        updated, changed = merged_document(document, run_id, resources, run, run_defaults=run_defaults)
        if changed:
            text = document_text(updated).encode("utf-8")
            try:
                atomic_write(state_file, lambda handle: handle.write(text))
            except (IOError, OSError) as exc:
                raise RunStateError("cannot write %s: %s" % (state_file, exc.strerror or exc)) from None
        return updated, changed


def final_block(status):
    # type: (str) -> dict
    """A record's ``final`` entry: the status the API gave after a delete, when it was read, and from where."""
    return {"status": status, "read_at": utc_now(), "source": "api"}


def find_resource(document, kind, resource_id):
    # type: (dict | None, str, str) -> dict | None
    for resource in (document or {}).get("resources") or []:
        if resource.get("kind") == kind and resource.get("id") == resource_id:
            return resource
    return None


def last_status(resource):
    # type: (dict) -> str
    """The newest status recorded for a resource: its ``final`` entry's (read back after a stop or delete),
    else its ``status``."""
    final = resource.get("final")
    if isinstance(final, dict) and final.get("status"):
        return final["status"]
    return resource.get("status") or ""


def pods_not_terminated(document):
    # type: (dict | None) -> list
    """The pods a run recorded whose last recorded status is not TERMINATED: running, stopped (a stopped pod
    still bills its volume disk) or unknown. Teardown by run id acts on these."""
    return [
        resource
        for resource in (document or {}).get("resources") or []
        if resource.get("kind") == "pod" and last_status(resource) != "TERMINATED"
    ]


def runs_of_pod(runs_dir, pod_id, pod_name="", prefix="trainops"):
    # type: (str, str, str, str) -> list
    """The runs under ``runs_dir`` a pod belongs to, sorted: those whose state.json records ``pod_id``, and the run
    its name carries (``<prefix>-<run_id>-<role>``, the longest such run id that has a run directory). A state.json
    that cannot be read is passed over: it is not evidence of owning the pod."""
    found = set()
    try:
        names = os.listdir(runs_dir)
    except OSError:
        return []
    for run_id in names:
        if run_id_problem(run_id):
            continue
        try:
            document = load(os.path.join(runs_dir, run_id, STATE_NAME), run_id)
        except RunStateError:
            continue
        if find_resource(document, "pod", pod_id) is not None:
            found.add(run_id)
    head = prefix + "-"
    if pod_name.startswith(head):
        parts = pod_name[len(head) :].split("-")
        for end in range(len(parts) - 1, 0, -1):
            candidate = "-".join(parts[:end])
            if candidate in names and os.path.isdir(os.path.join(runs_dir, candidate)):
                found.add(candidate)
                break
    return sorted(found)


# --- recording from the modules that create resources (record_to) ------------------------------------------

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)

RECORD_ARGUMENT_SPEC = dict(
    record_to=dict(type="path"),
    record_run_id=dict(type="str"),
    record_fields=dict(type="dict"),
)


@contextlib.contextmanager
def signals_held(signals=HELD_SIGNALS):
    """Hold ``signals`` off (blocked, so they stay pending) inside the block; they are delivered when it ends.

    Between a create call and the write of its record an interrupt would leave a billing resource that no
    file knows about: the create and the write happen inside this block, and Ctrl-C takes effect after it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def public_url(url):
    # type: (str | None) -> str | None
    """``url`` without user information (a URL may carry a credential)."""
    if not url:
        return url
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1", url)


class ResourceRecorder(object):
    """What a module's ``record_to``, ``record_run_id`` and ``record_fields`` options ask for.

    ``enabled`` only with ``record_to``; in check mode nothing is ever written. ``write`` upserts one
    resource of ``kind`` with the module's ``record_fields`` under the fields the module knows."""

    def __init__(self, params, kind, check_mode=False):
        self.kind = kind
        self.state_file = params.get("record_to")
        self.enabled = bool(self.state_file)
        self.check_mode = check_mode
        self.fields = dict(params.get("record_fields") or {})
        self.api_url = public_url(params.get("api_url"))
        run_id = params.get("record_run_id")
        if self.enabled and not run_id:
            # runs/<run_id>/state.json: the directory names the run.
            run_id = os.path.basename(os.path.dirname(os.path.abspath(self.state_file)))
        self.run_id = run_id
        self.document = None

    def option_problems(self):
        # type: () -> list
        """Problems with the record options, found before anything is created."""
        if not self.enabled:
            given = [k for k, v in (("record_run_id", self.run_id), ("record_fields", self.fields)) if v]
            return ["%s needs record_to" % k for k in given]
        owned = sorted(k for k in self.fields if k in ("kind", "id", *RESOURCE_OWNED_KEYS))
        if owned:
            return ["record_fields must not set %s (the module sets them)" % ", ".join(owned)]
        try:
            check_inputs(self.run_id, [dict(self.fields, kind=self.kind, id="x")], None)
            self.document = preflight(self.state_file, self.run_id)
        except RunStateError as exc:
            return ["record_to: %s" % exc]
        return []

    def recorded(self, resource_id):
        # type: (str) -> dict | None
        """The resource as the file recorded it when last read or written here."""
        return find_resource(self.document, self.kind, resource_id)

    def write(self, resource_id, fields):
        # type: (str, dict) -> bool
        """Upsert the resource (``fields`` over ``record_fields``); True when the file changed. RunStateError."""
        if not self.enabled or self.check_mode or not resource_id:
            return False
        resource = dict(self.fields)
        resource.update((k, v) for k, v in fields.items() if v is not None or k not in resource)
        resource.update(kind=self.kind, id=resource_id)
        self.document, changed = record(
            self.state_file, self.run_id, [resource], run_defaults={"api_url": self.api_url}
        )
        return changed


class ResourceRecording(object):
    """``record_to`` in a module that creates resources of one kind (runpod_pod, runpod_network_volume).

    Mixed in before the module's base class (``class RunPodPod(ResourceRecording, RunPodModule)``), whose
    ``fail(msg, **extra)`` it extends and whose ``result`` holds the resource's summary under
    ``record_result_key``. The module class says what it records (the class attributes below) and gives
    ``summarise(resource)`` (an API resource's summary) and ``recorded_fields(summary, action, final)`` (the
    fields of its record)."""

    record_kind = None  # the resource's kind in state.json: "pod"
    record_result_key = None  # the result key (and fail() keyword) of its summary: "pod"
    record_noun = None  # how messages name it: "network volume"
    record_label_keys = ("name",)  # summary fields a message shows after its id
    record_remedy = None  # what to do with one that could not be recorded: "terminate it"
    record_id_key = None  # a fail() keyword for the id of one that could not be recorded, if any

    def summarise(self, resource):
        raise NotImplementedError

    def recorded_fields(self, summary, action=None, final=None):
        raise NotImplementedError

    def start_recording(self, module):
        """The recorder of ``record_to``; the secret-looking values of ``record_fields`` kept out of the output."""
        self.recorder = ResourceRecorder(module.params, self.record_kind, module.check_mode)
        module.no_log_values.update(secret_values(module.params.get("record_fields")))
        self.record_failed = False

    def record(self, summary, action=None, final=None):
        # type: (dict, str, dict) -> None
        """Upsert the resource in record_to; a failure ends the module, naming the resource so it is never lost."""
        if not self.recorder.enabled or not (summary or {}).get("id"):
            return
        fields = self.recorded_fields(summary, action, final)
        try:
            self.recorder.write(summary["id"], fields)
        except RunStateError as exc:
            self.record_failed = True
            label = ", ".join("%s" % (summary.get(key),) for key in self.record_label_keys)
            extra = {self.record_result_key: summary}
            if self.record_id_key:
                extra[self.record_id_key] = summary["id"]
            self.fail(
                "%s %s (%s) could not be recorded in %s: %s. Record it by hand or %s."
                % (self.record_noun, summary["id"], label, self.recorder.state_file, exc, self.record_remedy),
                **extra,
            )

    def created(self, resource):
        """The create's answer, recorded before anything else happens."""
        self.result["created"] = True
        self.record(self.summarise(resource), "created")
        return resource

    def record_found(self, resources, made_here=None):
        # type: (list, object) -> list
        """Record, as they are found, the resources a create may have made (``made_here(resource)``: those that
        carry its token; all of them when not given), however it failed. Returns ``resources``."""
        for resource in resources:
            if made_here is None or made_here(resource):
                self.record(self.summarise(resource), "created")
        return resources

    def fail(self, msg, **extra):
        """Fail; a resource this task created, or one record_to already holds, gets its last known state first."""
        summary = extra.get(self.record_result_key) or self.result.get(self.record_result_key) or {}
        resource_id = summary.get("id")
        keep = self.result.get("created") or self.recorder.recorded(resource_id) is not None
        if resource_id and keep and not self.record_failed and self.recorder.enabled and not self.module.check_mode:
            try:
                self.recorder.write(
                    resource_id, self.recorded_fields(summary, "created" if self.result.get("created") else None)
                )
            except RunStateError as exc:
                msg = "%s (and recording it in %s failed: %s)" % (msg, self.recorder.state_file, exc)
        super(ResourceRecording, self).fail(msg, **extra)
