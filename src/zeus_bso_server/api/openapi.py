"""The app's OpenAPI schema, with its parameters described as a client sends them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

_NULL = {"type": "null"}


def _absent_not_null(schema: dict[str, Any]) -> None:
    """``x: int | None = None`` becomes ``anyOf: [integer, null]``; a query string has no null
    (a parameter is absent or has a value, and ``?x=null`` is refused), so keep the value's
    schema alone. The parameter stays optional (``required: false``)."""
    alternatives = schema.get("anyOf")
    if not alternatives or _NULL not in alternatives:
        return
    values = [alternative for alternative in alternatives if alternative != _NULL]
    if len(values) == 1:
        del schema["anyOf"]
        schema.update(values[0])


def openapi_of(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The schema FastAPI builds for ``app`` (and caches), its parameters' nulls dropped."""

    def openapi() -> dict[str, Any]:
        schema = FastAPI.openapi(app)
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                for parameter in operation.get("parameters", []):
                    _absent_not_null(parameter.get("schema", {}))
        return schema

    return openapi
