"""The documented shape of ``GET …/changes?format=debezium`` (docs/debezium.md); answers are
written by ``encode_debezium``, never validated through these models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["DebeziumChangesPage"]


class DebeziumSourceOut(BaseModel):
    version: str
    connector: Literal["pgfeed"]
    name: str = Field(description="The feed")
    ts_ms: int = Field(description="Commit time, milliseconds since 1970")
    ts_us: int
    snapshot: Literal["true", "false"] = Field(description='"true" for backfill rows (`op` r)')
    db: str | None
    schema_: str | None = Field(alias="schema")
    table: str | None
    txId: int
    lsn: int = Field(description="The change's LSN as a number")
    xmin: None
    commit_lsn: str = Field(description="pgfeed: commit LSN of the change's transaction")
    seq: int = Field(description="pgfeed: position of the change in its transaction")
    origin: str | None
    table_version: int | None = Field(None, description="pgfeed: the table's schema version the "
                                      "row was decoded with (`GET …/tables/{table}/schema`)")
    json_null: dict[str, list[str]] | None = Field(
        None, description="pgfeed, only when some: per image (`before`, `after`) the json/jsonb "
                          "columns holding the JSON document `null` (not SQL NULL)")


class DebeziumMessageOut(BaseModel):
    prefix: str | None
    content: str | None = Field(description="base64")


class DebeziumEnvelope(BaseModel):
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    source: DebeziumSourceOut
    op: Literal["c", "u", "d", "r", "t", "m", "ddl"]
    ts_ms: int = Field(description="Commit time (not the time of reading)")
    ts_us: int
    transaction: None
    message: DebeziumMessageOut | None = Field(None, description="`m` envelopes only")
    ddl: dict[str, Any] | None = Field(None, description="pgfeed's own `ddl` envelopes only (feed "
                                       "option `ddl: \"capture\"`): the native event's `ddl`")


class DebeziumChangesPage(BaseModel):
    """`format=debezium`: Debezium envelopes; `next` is a native cursor."""

    changes: list[DebeziumEnvelope]
    next: str
    head: str
    has_more: bool
