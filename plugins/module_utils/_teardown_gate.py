# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The teardown gate (docs/teardown.md): may this pod be terminated, and if not, what is missing.

Pure. The teardown role gathers the facts (the pod from the API, checkpoint_verify on the pod and on the
controller, the network volume lookup) and the teardown_gate module hands them here. Nothing is terminated
until the newest checkpoint is (a) pulled to the controller and verified there by loading it, or (b) on a
network volume that exists and loaded on the pod; and the operator named the pod.
"""

from __future__ import annotations

import json
import os


def _pod_label(pod) -> str:
    return "pod %s (%s)" % (pod.get("name"), pod.get("id"))


def unreachable_error(pod, check_mode, start_stopped) -> str:
    status = pod.get("status")
    if status == "EXITED":
        advice = "Set teardown_start_stopped=true to start it for the checks (it is stopped again if the gate refuses)"
        if check_mode and start_stopped:
            advice += " (check mode starts nothing)"
    else:
        advice = "Wait until it runs and SSH answers (trainops.gpu.runpod_pod state=running wait_for=ssh) and run again"
    return (
        "%s is %s%s: its durable root cannot be read, so its newest checkpoint is unknown. %s, or use"
        " teardown_action=stop (or teardown_allow_no_known_checkpoint=true to terminate it unread)."
        % (_pod_label(pod), status, " and SSH does not answer yet" if status == "RUNNING" else "", advice)
    )


def no_durable_root_error(pod) -> str:
    return (
        "%s has neither a network volume nor a persistent volume, so it has no durable root to hold checkpoints:"
        " set teardown_durable_root to where its checkpoints are, or teardown_allow_no_known_checkpoint=true to"
        " terminate it without one." % _pod_label(pod)
    )


def volume_check(pod, newest, volumes, loaded) -> dict:
    """(b): the network volume is on the account and the newest checkpoint loaded on the pod."""
    volume = pod.get("network_volume") or {}
    volumes = volumes or []
    loaded = loaded or {}
    found = len(volumes) == 1
    loaded_ok = bool(loaded.get("ok", False))
    if found and loaded_ok:
        reason = None
    elif not found:
        reason = "network volume %s is not on the account" % volume.get("id")
    else:
        reason = "loading %s on the pod (checkpoint_verify load=true) did not succeed: %s" % (
            newest["path"],
            "; ".join(loaded.get("errors") or []) or "no load result",
        )
    return {
        "id": volume.get("id"),
        "path": volume.get("path"),
        "found": found,
        "data_center": (volumes[0] if volumes else {}).get("data_center"),
        "checkpoint": newest["path"],
        "step": newest.get("step"),
        "manifest_sha256": newest.get("manifest_sha256"),
        "loaded": loaded,
        "ok": found and loaded_ok and loaded.get("path", "") == newest["path"],
        "reason": reason,
    }


def pulled_check(newest, path, exists, verify, controller_has) -> dict:
    """(a): the pulled copy at ``path`` exists, loads (``verify``: checkpoint_verify's answer) and is the same."""
    verify = verify or {}
    copy = (verify.get("checkpoints") or [{}])[0] or {}
    name = os.path.basename(newest["path"])
    errors = []
    if not exists:
        errors.append(
            "%s does not exist (the controller has %s); pull it with the sync role (tasks_from: pull,"
            " sync_pull_checkpoints: [%s])"
            % (path, ", ".join(controller_has) if controller_has else "no checkpoint", name)
        )
    elif verify.get("failed", False) and "checkpoints" not in verify:
        errors.append("checkpoint_verify load=true failed on %s: %s" % (path, verify.get("msg")))
    elif not verify.get("valid", False):
        errors.append(
            "checkpoint_verify load=true on %s failed: %s"
            % (path, "; ".join(copy.get("errors") or []) or verify.get("msg", "not valid"))
        )
    elif copy.get("manifest_sha256") != newest.get("manifest_sha256"):
        errors.append(
            "the pulled copy %s is not the checkpoint on the pod (manifest sha256 %s on the controller, %s on the"
            " pod); pull it again" % (path, copy.get("manifest_sha256"), newest.get("manifest_sha256"))
        )
    return {
        "path": path,
        "exists": bool(exists),
        "pod_checkpoint": newest["path"],
        "step": newest.get("step"),
        "pod_manifest_sha256": newest.get("manifest_sha256"),
        "manifest_sha256": copy.get("manifest_sha256"),
        "valid": verify.get("valid", False),
        "loaded": verify.get("loaded"),
        "errors": errors,
        "ok": not errors,
        "controller_has": list(controller_has or []),
    }


def _held(controller_has) -> str:
    if not controller_has:
        return "the controller holds no pulled checkpoint of the run"
    return "the controller holds %s (newest %s)" % (", ".join(controller_has), sorted(controller_has)[-1])


def would_lose(pod, reachable, durable_root, on_volume, pod_checks=None, controller_has=None) -> dict:
    """What terminating the pod would delete of the run's checkpoints, read wherever it can be read.

    ``read``: the pod's durable root was read; ``lost``: the checkpoints on it that no network volume keeps and
    the controller does not hold (None when not read); ``sentence``: the same in words, for the message.
    """
    controller_has = sorted(controller_has or [])
    volume = pod.get("network_volume") or {}
    disk_gb = (pod.get("persistent_volume") or {}).get("size") or 0
    label = _pod_label(pod)
    answer = {"read": False, "on_pod": None, "lost": None, "controller_has": controller_has}
    if durable_root and on_volume:
        sentence = "the checkpoints under %s stay on network volume %s: nothing of them is deleted with %s" % (
            durable_root,
            volume.get("id"),
            label,
        )
    elif not reachable:
        sentence = (
            "%s is %s and its durable root %s was not read: whatever checkpoints %s holds are deleted with it"
            % (
                label,
                pod.get("status"),
                durable_root or "(none)",
                ("its %s GB volume disk" % disk_gb) if disk_gb else "its container disk",
            )
        )
    elif not durable_root:
        sentence = "%s has no durable root: no checkpoint outlives its container disk anyway" % label
    elif pod_checks is None or pod_checks.get("error") is not None:
        sentence = "reading the checkpoints of %s failed: whatever they are, they are deleted with it" % label
    else:
        on_pod = [os.path.basename(c.get("path", "")) for c in pod_checks.get("checkpoints") or []]
        lost = [name for name in on_pod if name not in controller_has]
        answer.update(read=True, on_pod=on_pod, lost=lost)
        if not on_pod:
            sentence = "%s holds no checkpoint under %s: nothing is lost" % (label, pod_checks.get("root"))
        elif not lost:
            held = ", ".join(on_pod)
            sentence = "every checkpoint %s holds (%s) is on the controller: nothing is lost" % (label, held)
        else:
            sentence = "%s checkpoint(s) of %s are not on the controller and are deleted with it: %s" % (
                len(lost),
                label,
                ", ".join(lost),
            )
    return dict(answer, sentence="%s; %s." % (sentence, _held(controller_has)))


def confirm_error(pod, confirm):
    """What is wrong with ``confirm``, None when it names the pod (its id or its name)."""
    if confirm in (pod.get("id"), pod.get("name")):
        return None
    given = (
        "teardown_confirm is empty"
        if not confirm
        else ("teardown_confirm %s names neither the id nor the name of this pod" % json.dumps(confirm))
    )
    return "%s: set teardown_confirm=%s (or %s) to terminate %s." % (
        given,
        pod.get("id"),
        pod.get("name"),
        _pod_label(pod),
    )


def judge(
    pod,
    reachable,
    durable_root,
    on_volume,
    pod_checks=None,
    volumes=None,
    pulled=None,
    confirm="",
    allow_no_known_checkpoint=False,
    start_stopped=False,
    check_mode=False,
    controller_has=None,
) -> dict:
    """The gate's answer: ``ok``, ``errors`` (each a sentence naming what is missing and how to supply it),
    ``checks`` (``volume`` for (b), ``pulled`` for (a), when they were judged), ``newest`` (the pod's newest
    checkpoint, None when unknown) and ``needs_pulled`` ((a) must be judged: the caller gathers ``pulled``).

    ``pulled``: ``path``, ``exists``, ``verify`` (checkpoint_verify load=true on it) and ``controller_has``.
    ``would_lose`` (what terminating deletes, :func:`would_lose`) is read and said whatever
    ``allow_no_known_checkpoint`` waives: no durable root, none under it, or a durable root that cannot be read.
    """
    errors = []
    checks = {}
    newest = None
    needs_pulled = False
    if not reachable and not allow_no_known_checkpoint:
        errors.append(unreachable_error(pod, check_mode, start_stopped))
    if reachable and not durable_root and not allow_no_known_checkpoint:
        errors.append(no_durable_root_error(pod))
    if reachable and durable_root and pod_checks is not None:
        found = pod_checks.get("checkpoints") or []
        newest = found[0] if found else None
        if pod_checks.get("error") is not None:
            if not allow_no_known_checkpoint:
                errors.append(
                    "reading the checkpoints of pod %s under %s failed: %s (teardown_allow_no_known_checkpoint=true"
                    " terminates it unread)" % (pod.get("name"), pod_checks.get("root"), pod_checks.get("error"))
                )
        elif newest is None and not allow_no_known_checkpoint:
            errors.append(
                "%s has no checkpoint at all under %s%s: set teardown_allow_no_known_checkpoint=true to terminate it"
                " without one."
                % (
                    _pod_label(pod),
                    pod_checks.get("root"),
                    "" if pod_checks.get("exists") else " (the directory does not exist)",
                )
            )
        if newest is not None and not newest.get("valid"):
            errors.append(
                "the newest checkpoint on pod %s, %s, does not verify there: %s. Keep an older one by moving it aside"
                " (trainops.gpu.checkpoint_verify quarantine=true), then pull and verify the newest valid one."
                % (pod.get("name"), newest.get("path"), "; ".join(newest.get("errors") or []))
            )
        if newest is not None and newest.get("valid"):
            if on_volume:
                checks["volume"] = volume_check(pod, newest, volumes, pod_checks.get("loaded"))
            needs_pulled = not checks.get("volume", {}).get("ok", False)
            if needs_pulled and pulled is not None:
                check = pulled_check(
                    newest, pulled.get("path"), pulled.get("exists"), pulled.get("verify"), pulled.get("controller_has")
                )
                checks["pulled"] = check
                if check["errors"]:
                    reason = checks.get("volume", {}).get("reason")
                    errors.append(
                        "the newest checkpoint on pod %s, %s (step %s), is not verified on the controller: %s%s"
                        % (
                            pod.get("name"),
                            newest.get("path"),
                            newest.get("step"),
                            "; ".join(check["errors"]),
                            (" (Network volume check: %s.)" % reason) if reason else "",
                        )
                    )
    error = confirm_error(pod, confirm)
    if error:
        errors.append(error)
    lost = would_lose(pod, reachable, durable_root, on_volume, pod_checks, controller_has)
    return {
        "ok": not errors,
        "errors": errors,
        "checks": checks,
        "newest": newest,
        "needs_pulled": needs_pulled,
        "would_lose": lost,
    }
