"""A page of Debezium-shaped envelopes (``GET …/changes?format=debezium``): the envelopes stay
plain dicts, the shape code written for Debezium's PostgreSQL connector already reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DebeziumPage"]


@dataclass(frozen=True, slots=True)
class DebeziumPage:
    """``envelopes`` in feed order; ``next``, ``head`` and ``has_more`` as for a native page (a
    native cursor: resume a native or a Debezium read from it)."""

    envelopes: list[dict[str, Any]]
    next: str
    head: str | None
    has_more: bool

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DebeziumPage:
        return cls(list(d.get("changes") or ()), d["next"], d.get("head"),
                   bool(d.get("has_more", False)))
