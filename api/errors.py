"""Errors in Unity Catalog's shape: `{"error_code": "NOT_FOUND", "message": "..."}`.

One body for every route, UC or Lakegate, so clients need one error parser; the codes are
the ones UC's OpenAPI and Databricks' REST APIs use for each HTTP status.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

CODES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    413: "REQUEST_LIMIT_EXCEEDED",
    500: "INTERNAL_ERROR",
    501: "NOT_IMPLEMENTED",
    503: "TEMPORARILY_UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class ErrorBody(BaseModel):
    """Every error response."""

    error_code: str = Field(description="NOT_FOUND, INVALID_ARGUMENT, PERMISSION_DENIED, ...")
    message: str = Field(description="One line; never data the caller may not see")


#: A statement ran but its outcome line is not in the audit log (distinct from a refusal:
#: the client must not retry it).
OUTCOME_NOT_RECORDED = "OUTCOME_NOT_RECORDED"


class ApiError(Exception):
    def __init__(self, status: int, message: str, error_code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_code = error_code or CODES.get(status, "UNKNOWN")


def body(status: int, message: str, error_code: str | None = None) -> dict[str, str]:
    return {"error_code": error_code or CODES.get(status, "UNKNOWN"), "message": message}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` for the error statuses a route can answer with."""
    text = {
        400: "Invalid argument",
        401: "No or invalid bearer token",
        403: "Not allowed",
        404: "Not found (or not visible to the caller)",
        409: "Conflict",
        500: "The statement ran but its outcome is not on record (OUTCOME_NOT_RECORDED): "
        "do not retry it",
        501: "Not supported by Lakegate",
        503: "Audit log unavailable: nothing is returned",
        504: "Timed out",
    }
    return {
        s: {"model": ErrorBody, "description": text.get(s, "Error")}
        for s in sorted({400, 401, 503, *statuses})
    }
