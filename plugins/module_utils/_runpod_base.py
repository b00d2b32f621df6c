# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The base every RunPod module subclasses, in the manner of hetzner.hcloud's ``_base.py``.

It builds the API client from the shared options, keeps the result, marks ``changed`` and turns
every API error and wait timeout into one failure shape: ``msg`` naming the call, status, title,
detail and errors, plus ``api_error`` with the same fields, plus whatever the module already knows
(for example the id of a pod it created before a wait ran out).
"""

from __future__ import annotations

import uuid

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.trainops.gpu.plugins.module_utils._runpod import (
    API_KEY_ENV,
    API_URL_ENV,
    DEFAULT_API_URL,
    RunPodClient,
    RunPodError,
    RunPodUnreconciled,
    RunPodWaitTimeout,
    check_api_url,
)
from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import secret_env_values

# Pause between the lookups that decide whether a create that failed happened.
RECHECK_DELAY_S = 1.0
# A create that got no answer (timeout, dropped connection) may still be running on the server: it is looked
# for during reconcile_window seconds, by default api_timeout plus this margin, at most the maximum.
RECONCILE_WINDOW_MARGIN_S = 10
RECONCILE_WINDOW_MAX_S = 600


def creating_argument_spec() -> dict:
    """The options of modules that create (the trainops.gpu.runpod.create doc fragment)."""
    return dict(reconcile_window=dict(type="int"))


def new_create_token() -> str:
    """A client token for one create: it travels with the resource, so the create can be found again."""
    return uuid.uuid4().hex


def reconcile_window(params) -> int:
    """Seconds to look for what a create that got no answer made: ``reconcile_window``, else api_timeout + 10."""
    window = params.get("reconcile_window")
    if window is None:
        window = (params.get("api_timeout") or 30) + RECONCILE_WINDOW_MARGIN_S
    return min(window, RECONCILE_WINDOW_MAX_S)


def settle_create(client, send, find, window_s, recheck_s=RECHECK_DELAY_S):
    """Send a create; after an ambiguous failure look for what it made, and send it again only when nothing came.

    ``find()`` lists the live resources carrying the create's token (or name). After a failure the server
    answered (5xx) it is read, and once more ``recheck_s`` later when empty; after no answer at all (timeout,
    dropped connection) the server may still be working on it, so it is read every ``recheck_s`` for
    ``window_s`` seconds. Found: returns ``(found, failure)``. Nothing: the create is sent again, at most
    ``api_retries`` times (RunPodClient.reconcile). Success: ``(result, None)``. Raises RunPodUnreconciled.
    """
    failures = []

    def sending():
        try:
            return send()
        except RunPodError as exc:
            failures.append(exc)
            raise

    def looking():
        budget = recheck_s if failures[-1].status is not None else max(window_s, recheck_s)
        found, waited = find(), 0.0
        while not found and waited < budget:
            client._sleep(recheck_s)
            waited += recheck_s
            found = find()
        return found

    return client.reconcile(sending, looking, bool)


def runpod_argument_spec() -> dict:
    """The options documented in the trainops.gpu.runpod doc fragment."""
    return dict(
        api_key=dict(type="str", required=True, no_log=True, fallback=(env_fallback, [API_KEY_ENV])),
        api_url=dict(type="str", default=DEFAULT_API_URL, fallback=(env_fallback, [API_URL_ENV])),
        api_timeout=dict(type="int", default=30),
        api_retries=dict(type="int", default=5),
        validate_certs=dict(type="bool", default=True),
    )


class RunPodAnsibleModule(AnsibleModule):
    """AnsibleModule whose output, ``invocation`` included, never shows a secret of its ``env`` or ``secret_env``.

    no_log masks the value of ``secret_env``, not a secret-named variable given in ``env`` (``HF_TOKEN``, say) nor a
    ``secret_env`` value repeated in ``env``: their values (``secret_env_values``) join ``no_log_values`` on every
    way out, a failure of the argument checks included, before anything else is run."""

    def hide_env_secrets(self) -> None:
        params = getattr(self, "params", None) or {}
        env, secret_env = params.get("env"), params.get("secret_env")
        env = dict(env) if isinstance(env, dict) else {}
        secret_env = secret_env if isinstance(secret_env, dict) else {}
        env.update(secret_env)
        self.no_log_values.update(secret_env_values(env, secret_env))

    def exit_json(self, **kwargs):
        self.hide_env_secrets()
        super(RunPodAnsibleModule, self).exit_json(**kwargs)

    def fail_json(self, msg, **kwargs):
        self.hide_env_secrets()
        super(RunPodAnsibleModule, self).fail_json(msg, **kwargs)


class RunPodModule(object):
    """Shared plumbing: client, result, failure shape. Subclasses implement ``run()``."""

    def __init__(self, module: AnsibleModule):
        self.module = module
        self.result = {"changed": False}
        self.client = self._build_client()

    @classmethod
    def build_module(cls, argument_spec, **kwargs) -> AnsibleModule:
        spec = runpod_argument_spec()
        spec.update(argument_spec)
        return RunPodAnsibleModule(argument_spec=spec, **kwargs)

    def _build_client(self) -> RunPodClient:
        params = self.module.params
        if params["api_timeout"] < 1:
            self.module.fail_json(msg="api_timeout must be at least 1 second, got %s" % params["api_timeout"])
        if params["api_retries"] < 0:
            self.module.fail_json(msg="api_retries must not be negative, got %s" % params["api_retries"])
        window = params.get("reconcile_window")
        if window is not None and not 0 <= window <= RECONCILE_WINDOW_MAX_S:
            self.module.fail_json(
                msg="reconcile_window must be 0..%s seconds, got %s" % (RECONCILE_WINDOW_MAX_S, window)
            )
        try:
            check_api_url(params["api_url"])
            return RunPodClient(
                api_key=params["api_key"],
                api_url=params["api_url"],
                timeout=params["api_timeout"],
                max_retries=params["api_retries"],
                validate_certs=params["validate_certs"],
            )
        except ValueError as exc:
            self.module.fail_json(msg=str(exc))

    def mark_changed(self) -> None:
        self.result["changed"] = True

    def fail(self, msg, **extra) -> None:
        result = dict(self.result)
        result.update(extra)
        self.module.fail_json(msg=msg, **result)

    def fail_api(self, error: RunPodError, context=None, **extra) -> None:
        msg = error.message if not context else "%s: %s" % (context, error.message)
        self.fail(msg, api_error=error.to_dict(), **extra)

    def create_reconciled(self, kind, name, send, find_named, ids_key):
        """Send a create; after an ambiguous failure (5xx, no response) adopt what it made, never a duplicate.

        ``send()`` posts the create; ``find_named()`` lists the live resources carrying the create's token or
        name. After an ambiguous failure they are looked up (see settle_create: a failure without an answer
        is looked for during ``reconcile_window``): one match is adopted (returned with True), several are an
        error listing their ids under ``ids_key``, none means the create did not happen and it is sent again,
        at most ``api_retries`` times. After a create that succeeded they are read back once, and more than
        one is an error too. Returns ``(resource, adopted)``.
        """
        try:
            found, failure = settle_create(self.client, send, find_named, reconcile_window(self.module.params))
        except RunPodUnreconciled as exc:
            if exc.read_error is not None:
                self.fail_api(
                    exc.read_error,
                    context="creating %s %r failed (%s) and looking it up failed too, so it may exist: "
                    "look for it before running again" % (kind, name, exc.failure.message),
                )
            self.fail_api(
                exc.failure, context="creating %s %r (none of that name exists; nothing was left)" % (kind, name)
            )
        if failure is None:
            self.check_single(kind, name, found, find_named, ids_key)
            return found, False
        if len(found) > 1:
            ids = sorted(m.get("id") for m in found)
            self.fail(
                "after a failed create, %d %ss are named %r (ids: %s); remove the extra ones"
                % (len(found), kind, name, ", ".join(ids)),
                api_error=failure.to_dict(),
                **{ids_key: ids},
            )
        self.module.warn(
            "%s for %r failed (%s) but the %s exists: adopted %s"
            % (failure.operation, name, failure.status or "no response", kind, found[0].get("id"))
        )
        return found[0], True

    def check_single(self, kind, name, created, find_named, ids_key) -> None:
        """After a create that succeeded, fail loudly when more than one resource carries its token or name."""
        try:
            found = find_named()
        except RunPodError as exc:
            self.module.warn("created %s %s, but reading it back failed: %s" % (kind, (created or {}).get("id"), exc))
            return
        if len(found) > 1:
            ids = sorted(m.get("id") for m in found)
            self.fail(
                "created %s %s, but %d %ss now carry its create token or the name %r (ids: %s); remove the extra "
                "ones" % (kind, (created or {}).get("id"), len(found), kind, name, ", ".join(ids)),
                created=True,
                **{ids_key: ids},
            )

    def run(self) -> None:
        raise NotImplementedError

    def execute(self) -> None:
        """Run the module and exit with one result shape for success and for every failure."""
        try:
            self.run()
        except RunPodError as exc:
            self.fail_api(exc)
        except RunPodWaitTimeout as exc:
            self.fail(str(exc))
        self.module.exit_json(**self.result)
