"""RFC 9457 problem details, the error shape of RunPod's v2 API."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any


class ApiError(Exception):
    """An error answered as application/problem+json {title, status, detail, errors}."""

    def __init__(
        self,
        status: int,
        detail: str,
        errors: list[str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors or []
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return problem_body(self.status, self.detail, self.errors)


def problem_body(status: int, detail: str, errors: list[str] | None = None) -> dict[str, Any]:
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    body: dict[str, Any] = {"title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = list(errors)
    return body


def unprocessable(errors: list[str]) -> ApiError:
    return ApiError(422, "request validation failed: " + "; ".join(errors), errors)


def bad_request(detail: str) -> ApiError:
    return ApiError(400, detail)


def not_found(kind: str, ident: str) -> ApiError:
    return ApiError(404, f"{kind} {ident} not found")


def conflict(detail: str) -> ApiError:
    return ApiError(409, detail)
