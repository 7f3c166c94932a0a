"""Kubernetes API errors, with the status codes, reasons and bodies the API server returns."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An API call the server refused. ``code`` and ``reason`` are Kubernetes' own."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, *, kind: str = "", name: str = "", group: str = "",
                 causes: list[dict] | None = None, retry_after: int | None = None, empty_details: bool = False):
        super().__init__(message)
        self.empty_details = empty_details  # kube-apiserver sends ``"details": {}`` with some errors
        self.message = message
        self.kind = kind
        self.name = name
        self.group = group
        self.causes = causes or []
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        """The ``Status`` object the API server sends with this error."""
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
        }
        if self.reason:  # some internal errors of kube-apiserver come without one
            body["reason"] = self.reason
        if details or self.empty_details:
            body["details"] = details
        body["code"] = self.code  # after the details, in kube-apiserver's order
        return body

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code} {self.reason}: {self.message})"


class BadRequest(ApiError):
    code, reason = 400, "BadRequest"


class Unauthorized(ApiError):
    code, reason = 401, "Unauthorized"


class Forbidden(ApiError):
    code, reason = 403, "Forbidden"


class NotFound(ApiError):
    code, reason = 404, "NotFound"


class MethodNotAllowed(ApiError):
    code, reason = 405, "MethodNotAllowed"


class AlreadyExists(ApiError):
    code, reason = 409, "AlreadyExists"


class Conflict(ApiError):
    code, reason = 409, "Conflict"


class Gone(ApiError):
    code, reason = 410, "Expired"


class UnsupportedMediaType(ApiError):
    code, reason = 415, "UnsupportedMediaType"


class Invalid(ApiError):
    code, reason = 422, "Invalid"


class TooManyRequests(ApiError):
    code, reason = 429, "TooManyRequests"


class InternalError(ApiError):
    code, reason = 500, "InternalError"


class ServiceUnavailable(ApiError):
    code, reason = 503, "ServiceUnavailable"


_BY_CODE = {c.code: c for c in (BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict,
                                 Gone, UnsupportedMediaType, Invalid, TooManyRequests, InternalError,
                                 ServiceUnavailable)}


def from_status(code: int, body: Any) -> ApiError:
    """The error for an HTTP answer (a client's view of a Status body)."""
    message = ""
    reason = ""
    details: dict = {}
    if isinstance(body, dict):
        message = str(body.get("message") or "")
        reason = str(body.get("reason") or "")
        details = body.get("details") or {}
    cls = _BY_CODE.get(code, ApiError)
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    err = cls(message or f"HTTP {code}", kind=str(details.get("kind") or ""), name=str(details.get("name") or ""),
              group=str(details.get("group") or ""), causes=list(details.get("causes") or []),
              retry_after=details.get("retryAfterSeconds"))
    if cls is ApiError:
        err.code = code
        err.reason = reason or "Unknown"
    return err


def is_not_found(e: BaseException) -> bool:
    return isinstance(e, NotFound)


def is_conflict(e: BaseException) -> bool:
    return isinstance(e, Conflict)
