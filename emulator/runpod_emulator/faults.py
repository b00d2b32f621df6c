"""Injected faults: rules that make the next N (or a fraction of) matching /v2 requests misbehave."""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FaultRule:
    id: int
    kind: str
    count: int | None
    rate: float | None
    method: str | None
    path_prefix: str | None
    latency_ms: int
    retry_after_s: int
    rng: random.Random = field(repr=False)

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method != method:
            return False
        if self.kind == "500_after_create" and (method != "POST" or path.rstrip("/") != "/v2/pods"):
            return False
        return self.path_prefix is None or path.startswith(self.path_prefix)

    def json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "count": self.count,
            "rate": self.rate,
            "method": self.method,
            "path_prefix": self.path_prefix,
            "latency_ms": self.latency_ms,
            "retry_after_s": self.retry_after_s,
        }


@dataclass
class FaultDecision:
    """What to do to one request: add latency, then maybe fail it (`kind`)."""

    latency_ms: int = 0
    kind: str | None = None
    retry_after_s: int = 1


class FaultInjector:
    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, spec: dict[str, Any]) -> FaultRule:
        """Add a rule from a validated admin body; without count or rate it applies to the next request."""
        count = spec.get("count")
        rate = spec.get("rate")
        if count is None and rate is None:
            count = 1
        rule = FaultRule(
            id=next(self._ids),
            kind=spec["kind"],
            count=count,
            rate=rate,
            method=spec.get("method"),
            path_prefix=spec.get("path_prefix"),
            latency_ms=spec.get("latency_ms", 1000 if spec["kind"] == "latency" else 0),
            retry_after_s=spec.get("retry_after_s", 1),
            rng=random.Random(spec.get("seed")),
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [rule.json() for rule in self._rules]

    def decide(self, method: str, path: str) -> FaultDecision:
        """Consume the rules this request triggers: every latency rule adds up, the first failure wins.

        500_after_create rules are left alone here: only a create that succeeded consumes one
        (`fail_after_create`), so a refused create does not use up the fault.
        """
        decision = FaultDecision()
        with self._lock:
            for rule in list(self._rules):
                if rule.kind == "500_after_create" or not rule.matches(method, path):
                    continue
                if rule.kind != "latency" and decision.kind is not None:
                    continue
                if not self._fires(rule):
                    continue
                if rule.kind == "latency":
                    decision.latency_ms += rule.latency_ms
                else:
                    decision.kind = rule.kind
                    decision.retry_after_s = rule.retry_after_s
        return decision

    def fail_after_create(self, method: str, path: str) -> bool:
        """Whether a 500_after_create rule turns this successful create into a 500 (consuming it)."""
        with self._lock:
            for rule in list(self._rules):
                if rule.kind == "500_after_create" and rule.matches(method, path) and self._fires(rule):
                    return True
        return False

    def _fires(self, rule: FaultRule) -> bool:
        """Roll the rule's rate (if any), then use up one of its count (if any); caller holds the lock."""
        if rule.rate is not None and rule.rng.random() >= rule.rate:
            return False
        if rule.count is not None:
            rule.count -= 1
            if rule.count <= 0:
                self._rules.remove(rule)
        return True
