"""The cost ledger: rate segments per pod and volume, and the bucketed `/v2/billing/*` answers."""

from __future__ import annotations

import calendar
import datetime as dt
from typing import Any

from .clock import parse_rfc3339, to_rfc3339
from .problems import bad_request, unprocessable
from .schema import query_int

BUCKETS = ["hour", "day", "week", "month", "year"]
# Billing windows stay within these bounds (1970-01-01 and 9000-01-01 UTC): beyond them Python's
# datetime cannot step a bucket forward or back, and no ledger holds anything there.
EARLIEST_S = 0.0
LATEST_S = 221845392000.0
# A ledger: rate segments {start, end (None while open), <rate key>: USD per hour, ...}, oldest first.
Segments = list[dict[str, Any]]


def open_segment(segments: list[dict[str, Any]], now: float, rates: dict[str, float]) -> None:
    """Close the current segment at `now` and open one with `rates` (no new one when all are zero)."""
    close_segment(segments, now)
    if any(rates.values()):
        segments.append({"start": now, "end": None, **rates})


def follow_rates(segments: list[dict[str, Any]], now: float, rates: dict[str, float]) -> None:
    """Open a segment with `rates` unless the current one already accrues exactly them."""
    current = segments[-1] if segments and segments[-1]["end"] is None else None
    if current is None or any(current.get(key) != value for key, value in rates.items()):
        open_segment(segments, now, rates)


def close_segment(segments: list[dict[str, Any]], now: float) -> None:
    if segments and segments[-1]["end"] is None:
        segments[-1]["end"] = max(now, segments[-1]["start"])


def amounts(segments: list[dict[str, Any]], start: float, end: float, now: float) -> dict[str, float]:
    """USD per rate key accrued by `segments` within [start, end)."""
    totals: dict[str, float] = {}
    for segment in segments:
        seg_end = segment["end"] if segment["end"] is not None else now
        overlap = min(seg_end, end) - max(segment["start"], start)
        for key, rate in segment.items():
            if key in ("start", "end"):
                continue
            totals[key] = totals.get(key, 0.0) + (rate * overlap / 3600.0 if overlap > 0 else 0.0)
    return totals


def overlaps(segments: list[dict[str, Any]], start: float, end: float, now: float) -> bool:
    return any(min(s["end"] if s["end"] is not None else now, end) > max(s["start"], start) for s in segments)


def _utc(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def bucket_floor(epoch: float, size: str) -> float:
    moment = _utc(epoch)
    if size == "hour":
        moment = moment.replace(minute=0, second=0, microsecond=0)
    elif size == "day":
        moment = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    elif size == "week":
        moment = moment.replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(days=moment.weekday())
    elif size == "month":
        moment = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    else:
        moment = moment.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    return moment.timestamp()


def bucket_next(start: float, size: str) -> float:
    moment = _utc(start)
    if size == "hour":
        return start + 3600
    if size == "day":
        return start + 86400
    if size == "week":
        return start + 7 * 86400
    if size == "month":
        days = calendar.monthrange(moment.year, moment.month)[1]
        return start + days * 86400
    return moment.replace(year=moment.year + 1).timestamp()


def bucket_prev(start: float, size: str) -> float:
    return bucket_floor(start - 1, size)


class BillingWindow:
    """The resolved startTime/endTime/bucketSize of a billing query, aligned to bucket boundaries."""

    MAX_BUCKETS = 10000

    def __init__(self, query: dict[str, list[str]], now: float) -> None:
        self.size = query.get("bucketSize", ["day"])[0]
        if self.size not in BUCKETS:
            raise unprocessable([f"bucketSize: {self.size!r} is not one of {', '.join(BUCKETS)}"])
        has_range = "startTime" in query or "endTime" in query
        if "lastN" in query:
            if has_range:
                raise bad_request("lastN is mutually exclusive with startTime/endTime")
            count = min(query_int(query, "lastN", 1, 1), self.MAX_BUCKETS)
            self.end = bucket_next(bucket_floor(now, self.size), self.size)
            start = bucket_floor(now, self.size)
            for _step in range(count - 1):
                if start <= EARLIEST_S:
                    break
                start = bucket_prev(start, self.size)
            self.start = start
            return
        self.start = bucket_floor(self._time(query, "startTime", now - 30 * 86400), self.size)
        end = self._time(query, "endTime", now)
        floor = bucket_floor(end, self.size)
        self.end = end if floor == end else bucket_next(floor, self.size)
        if self.end <= self.start:
            raise bad_request("endTime must be after startTime")

    @staticmethod
    def _time(query: dict[str, list[str]], name: str, default: float) -> float:
        if name not in query:
            return default
        try:
            value = parse_rfc3339(query[name][0])
        except ValueError:
            raise unprocessable([f"{name}: {query[name][0]!r} is not an RFC 3339 date-time"]) from None
        if not EARLIEST_S <= value < LATEST_S:
            raise unprocessable([f"{name}: {query[name][0]!r} is outside 1970-01-01 .. 9000-01-01"])
        return value

    def buckets(self) -> list[tuple[float, float]]:
        """Every bucket of the window; a window of more than MAX_BUCKETS is refused (400), never cut short."""
        result = []
        start = self.start
        while start < self.end:
            if len(result) == self.MAX_BUCKETS:
                raise bad_request(
                    f"the window {to_rfc3339(self.start)} .. {to_rfc3339(self.end)} holds more than "
                    f"{self.MAX_BUCKETS} {self.size} buckets (the emulator's cap): narrow startTime/endTime "
                    "or use a larger bucketSize"
                )
            end = bucket_next(start, self.size)
            result.append((start, end))
            start = end
        return result

    def query_json(self) -> dict[str, Any]:
        return {"startTime": to_rfc3339(self.start), "endTime": to_rfc3339(self.end), "bucketSize": self.size}


def _round(value: float) -> float:
    return round(value, 9)


def pod_billing(pods: list[dict[str, Any]], query: dict[str, list[str]], now: float) -> dict[str, Any]:
    amounts_by_rate = {"gpu": "gpuAmount", "cpu": "cpuAmount", "disk": "diskAmount"}
    return _billing(pods, query, now, ("podId", "uniquePodCount"), amounts_by_rate)


def volume_billing(volumes: list[dict[str, Any]], query: dict[str, list[str]], now: float) -> dict[str, Any]:
    amounts_by_rate = {"standard": "standardAmount", "highPerformance": "highPerformanceAmount"}
    return _billing(volumes, query, now, ("networkVolumeId", "uniqueNetworkVolumeCount"), amounts_by_rate)


def _billing(
    items: list[dict[str, Any]],
    query: dict[str, list[str]],
    now: float,
    names: tuple[str, str],
    amounts_by_rate: dict[str, str],
) -> dict[str, Any]:
    """Records per bucket and item ({id, ledger}) that accrued anything, and their totals.

    names: (the id field of records and of the query filter, the metadata field counting distinct ids);
    amounts_by_rate: ledger rate key -> record field of its amount.
    """
    id_field, unique_field = names
    window = BillingWindow(query, now)
    wanted = query.get(id_field, [None])[0]
    selected = [item for item in items if wanted is None or item["id"] == wanted]
    records = []
    totals = {"totalAmount": 0.0, **{field: 0.0 for field in amounts_by_rate.values()}}
    for start, end in window.buckets():
        for item in selected:
            if not overlaps(item["ledger"], start, end, now):
                continue
            accrued = amounts(item["ledger"], start, end, now)
            record: dict[str, Any] = {"startTime": to_rfc3339(start), "endTime": to_rfc3339(end), id_field: item["id"]}
            for rate, field in amounts_by_rate.items():
                record[field] = _round(accrued.get(rate, 0.0))
            record["totalAmount"] = _round(sum(record[field] for field in amounts_by_rate.values()))
            records.append(record)
            for key in totals:
                totals[key] += record[key]
    metadata = {
        "query": {**window.query_json(), id_field: wanted},
        "recordCount": len(records),
        unique_field: len({r[id_field] for r in records}),
        "totals": {k: _round(v) for k, v in totals.items()},
    }
    return {"records": records, "metadata": metadata}
