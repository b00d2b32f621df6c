"""The pod state machine shared by the API and the engine: ids and status transitions.

The statuses, the actions each allows and the API view live with the model (models.py).
"""

from __future__ import annotations

import secrets
import string

from . import ledger, pricing
from .models import Pod
from .store import Store

_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_id(length: int = 14) -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _index in range(length))


def transition(store: Store, now: float, pod: Pod, status: str, reason: str = "") -> None:
    """Move `pod` to `status`: timestamps, SSH endpoint, ledger segment, a system log line, saved."""
    old = pod.status
    pod.status = status
    pod.internal.status_since = now
    if status != "RUNNING":
        pod.internal.ssh_port = None
        pod.internal.ssh_ready = False
    if status == "RUNNING":
        pod.started_at = now
    segments = pod.internal.ledger
    ledger.follow_rates(segments, now, pricing.pod_rates(pod, status))
    if status == "TERMINATED":
        ledger.close_segment(segments, now)
        pod.internal.terminated_at = now
    suffix = f" ({reason})" if reason else ""
    store.append_log(pod.id, "system", f"pod status {old} -> {status}{suffix}", now)
    store.save_pod(pod)
