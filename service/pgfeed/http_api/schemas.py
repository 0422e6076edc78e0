"""Pydantic models of the HTTP API: request bodies, and the answers as ``/openapi.json`` documents them.

Change lists are never validated through these models on the hot path: the reading routes write
their bodies with ``encoding.to_json.dumps`` and declare these models for the documentation only.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pgfeed.decoding.changes import ToastMode
from pgfeed.feeds.model import ADOPTED_TABLES, NAME_RE
from pgfeed.replication.slots import PublishedTable
from pgfeed_client._cursor import CURSOR_PATTERN

# -- errors ---------------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="Machine-readable error code, e.g. `feed_not_found`, "
                                  "`cursor_expired`, `invalid_cursor`, `invalid_parameter`")
    message: str = Field(description="What went wrong and, for bad input, the expected form")
    oldest: str | None = Field(None, description="`cursor_expired` (410) only: the oldest "
                                                 "position still served")


class ErrorBody(BaseModel):
    """Every error answer: `{"error": {"code", "message"}}`."""

    error: ErrorDetail


# -- reading --------------------------------------------------------------------------------------


class DdlColumnOut(BaseModel):
    """A column of the table after a captured DDL command."""

    attnum: int
    name: str
    type: str = Field(description="`format_type(atttypid, atttypmod)`")
    type_oid: int
    not_null: bool
    default: str | None = Field(description="The default expression (`pg_get_expr`), null for none")
    generated: str | None = Field(None, description="Only when generated: `attgenerated` (`s`)")
    identity: str | None = Field(None, description="Only for an identity column: `attidentity` "
                                                   "(`a` always, `d` by default)")
    added: bool | None = Field(None, description="Only when true: new since the table's previous "
                                                 "captured command")
    previous_name: str | None = Field(None, description="Only for a column renamed since the "
                                                        "table's previous captured command")
    missing_value: Any = Field(None, description="Only when PostgreSQL holds one (`attmissingval`: "
                               "`ADD COLUMN ... DEFAULT` without a rewrite): the value rows that "
                               "existed before read, encoded as in `after`")


class DdlOut(BaseModel):
    """`ddl` events (feed option `ddl: \"capture\"`): the command captured at its position."""

    command: str = Field(description="The command tag: `ALTER TABLE`, `CREATE TABLE`, ...")
    object_type: str | None = Field(description="`pg_event_trigger_ddl_commands().object_type`: "
                                                "`table`, `table column`")
    object: str | None = Field(description="Its `object_identity`: `public.orders`, "
                                           "`public.orders.title`")
    table: str = Field(description="`schema.table` of the table it touched")
    old_name: str | None = Field(None, description="Only for a rename: the column's old name, or "
                                                   "the table's old `schema.table`")
    new_name: str | None = Field(None, description="Only for a rename: the new name")
    columns: list[DdlColumnOut] = Field(description="The table's columns after the command, in "
                                                    "attnum order")


class ChangeEvent(BaseModel):
    """One change event, as the contract's "Change event (JSON)" describes it."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    lsn: str = Field(description="LSN of the change, e.g. `0/16B1A20`")
    seq: int = Field(description="0-based position of the change in its transaction")
    commit_lsn: str
    xid: int
    commit_ts: str = Field(description="ISO 8601 commit time, UTC")
    op: Literal["insert", "update", "delete", "truncate", "message", "read", "ddl"]
    schema_: str | None = Field(None, alias="schema")
    table: str | None = None
    table_version: int | None = Field(None, description="Row changes: the table's schema version "
                                      "the change was decoded with (`GET …/tables/{table}/schema"
                                      "?at=<commit_lsn:seq>` describes it)")
    key: dict[str, Any] | None = Field(None, description="Replica-identity columns of the row "
                                                         "before the change")
    before: dict[str, Any] | None = Field(None, description="Whole old row (REPLICA IDENTITY FULL)")
    after: dict[str, Any] | None = None
    unchanged_toast: list[str] | None = None
    json_null: dict[str, list[str]] | None = Field(
        None, description="Only when some: per image (`key`, `before`, `after`) the json/jsonb "
                          "columns holding the JSON document `null` (written `null`, like SQL NULL)")
    toast_filled: list[str] | None = None
    origin: str | None = None
    prefix: str | None = Field(None, description="`message` events")
    content: str | None = Field(None, description="`message` events: base64")
    transactional: bool | None = None
    tables: list[str] | None = Field(None, description="`truncate` events: `schema.table` names")
    options: dict[str, bool] | None = Field(None, description="`truncate` events")
    ddl: DdlOut | None = Field(None, description="`ddl` events: the captured DDL command "
                                                 "(`schema`/`table` name the table it touched)")


class ChangesPage(BaseModel):
    changes: list[ChangeEvent]
    next: str = Field(description="Cursor to continue from (past filtered-out changes too)")
    head: str = Field(description="Commit LSN of the newest durable transaction")
    has_more: bool = Field(description="Whether the log already holds more past `next`")


class ChangesCount(BaseModel):
    """``/changes?format=count``: a page's envelope without its changes."""

    count: int = Field(description="Changes the page holds (after the filters)")
    next: str = Field(description="Cursor to continue from (past filtered-out changes too)")
    head: str = Field(description="Commit LSN of the newest durable transaction")
    has_more: bool = Field(description="Whether the log already holds more past `next`")


class TransactionOut(BaseModel):
    xid: int
    commit_lsn: str
    end_lsn: str
    commit_ts: str
    origin: str | None = None
    change_count: int = Field(description="Changes in the whole transaction (a page may hold a "
                                          "slice of a large one)")
    cursor: str = Field(description="Cursor after this transaction (or after this slice of it)")
    changes: list[ChangeEvent]


class TransactionsPage(BaseModel):
    transactions: list[TransactionOut]
    next: str
    head: str
    has_more: bool


class SplitsOut(BaseModel):
    boundaries: list[str] = Field(description="Ascending cursors: the first is `from`, the last "
                                              "`to`; consecutive pairs are the parts")


class ColumnOut(BaseModel):
    name: str
    type_oid: int
    type_name: str | None
    type: str | None = Field(None, description="The type with its modifiers as PostgreSQL's "
                             "`format_type(oid, typmod)` writes it (`numeric(12,2)`, `character "
                             "varying(40)`, `timestamp(3) with time zone`, `integer[]`); for a "
                             "type that is not built in, its name as the source sent it")
    typmod: int
    key: bool = Field(description="Part of the replica identity")
    previous_name: str | None = Field(None, description="Present only for a column renamed since "
                                      "the previous version (known from captured DDL, feed "
                                      "option `ddl: \"capture\"`; without it a rename reads as a "
                                      "drop and an add)")
    missing_value: Any = Field(None, description="Present only for a column added since the "
                               "previous version that PostgreSQL gives a missing value "
                               "(`attmissingval`: `ADD COLUMN ... DEFAULT` without a rewrite): the "
                               "value rows that existed before read, encoded as in a change "
                               "event's `after`. No change carries it to those rows. Absent: none "
                               "(never SQL NULL)")


class TableVersionOut(BaseModel):
    version: int
    valid_from: str = Field(description="Commit LSN of the transaction that introduced it")
    replica_identity: str
    columns: list[ColumnOut]
    previous_name: str | None = Field(None, description="Present only when the table's "
                                      "`schema.table` differs from the previous version's (a "
                                      "rename): that name")


class TableOut(TableVersionOut):
    model_config = ConfigDict(populate_by_name=True)

    relation_id: int
    schema_: str = Field(alias="schema")
    table: str
    name: str = Field(description="`schema.table`")
    versions: list[TableVersionOut] = Field(description="Every schema version, oldest first")


class TablesOut(BaseModel):
    tables: list[TableOut]


class TableSchemaOut(TableVersionOut):
    """One schema version of a table: the one in force at a position (`schema?at=`)."""

    model_config = ConfigDict(populate_by_name=True)

    relation_id: int
    schema_: str = Field(alias="schema")
    table: str
    name: str = Field(description="`schema.table`")
    key_columns: list[str] = Field(description="The replica identity's columns, in column order")


class TableSchemaHistoryOut(BaseModel):
    """Every schema version of a table, oldest first."""

    model_config = ConfigDict(populate_by_name=True)

    relation_id: int
    schema_: str = Field(alias="schema")
    table: str
    name: str = Field(description="`schema.table`")
    versions: list[TableSchemaOut]


class ConsumerAck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cursor: str = Field(description="Everything up to and including this cursor is acknowledged",
                        examples=["16/B374D848", "16/B374D848:41"],
                        json_schema_extra={"pattern": CURSOR_PATTERN})


class TrimRequest(BaseModel):
    """`POST /v1/feeds/{feed}/trim`: drop what a reader at `before` has already consumed."""

    model_config = ConfigDict(extra="forbid")

    before: str = Field(description="Drop every transaction a reader at this cursor has consumed "
                                    "(`latest`: everything; `earliest`: nothing)",
                        examples=["16/B374D848", "latest"],
                        json_schema_extra={"pattern": CURSOR_PATTERN})


class TrimOut(BaseModel):
    dropped: int = Field(description="Transactions removed")
    removed_consumers: list[str] = Field(description="Consumers the trim overtook (they had not "
                                                     "acknowledged what it dropped): deleted")
    oldest_lsn: str
    trimmed_lsn: str
    forced_trims: int = Field(description="Trims so far that dropped what a consumer had not "
                                          "acknowledged")


class ConsumerOut(BaseModel):
    name: str
    cursor: str = Field(description="Everything up to and including this is acknowledged")
    acked_at: str | None = Field(None, description="When the consumer last acknowledged "
                                                   "(ISO 8601, UTC)")
    expires_at: str | None = Field(None, description="When it expires unless it acknowledges "
                                                     "again (`consumer_max_idle_hours` after "
                                                     "`acked_at`); null: never")
    lag_bytes: int = Field(0, description="WAL bytes between its cursor and the feed's head")


class ConsumersOut(BaseModel):
    consumers: list[ConsumerOut]


# -- admin ----------------------------------------------------------------------------------------


class RetentionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hours: float | None = Field(168.0, ge=0, le=1_000_000, allow_inf_nan=False,
                                description="Drop transactions older than this; null: no age limit")
    bytes: int | None = Field(None, ge=0, le=1 << 62,
                              description="Keep at most this many payload bytes; null: no limit")
    consumer_max_idle_hours: float | None = Field(
        168.0, ge=0, le=1_000_000, allow_inf_nan=False,
        description="A named consumer that has not acknowledged for this long expires: it is "
                    "deleted (logged) and retention stops waiting for it. Each consumer's "
                    "`expires_at` in the feed's status says when. null: consumers never expire "
                    "(one that stops acknowledging then holds the log until an admin deletes it)")


class FeedOptionsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    toast: ToastMode = Field(
        "placeholder", description="What an unchanged TOAST column's value becomes")
    snapshot: Literal["never", "backfill", "export"] = Field(
        "never", description="`backfill`: backfill every table of the feed when it is created "
                             "(a backfill like any other: resumable, with progress); `export` is "
                             "the older name of the same")
    messages: bool = Field(False, description="Serve `pg_logical_emit_message` payloads "
                           "(transactional ones with their transaction). Opt-in, and it costs: "
                           "with it on, the source does not stream big transactions (a message "
                           "rolled back with its savepoint must never be served, and a streamed "
                           "one cannot be told apart), so a transaction past "
                           "`logical_decoding_work_mem` is spilled to the source's disk by its "
                           "walsender and sent only after its commit; status `streaming_in_use` "
                           "is then false")
    two_phase: bool = Field(False, description="Decode prepared transactions at PREPARE "
                                               "(served at COMMIT PREPARED)")
    streaming: bool = Field(
        True, description="Let PostgreSQL stream a transaction past `logical_decoding_work_mem` "
                          "before its commit (the default). Used only when `messages` is false: PostgreSQL "
                          "cannot say which subtransaction a streamed message belongs to, so one "
                          "rolled back with `ROLLBACK TO SAVEPOINT` would be served. With "
                          "`messages` on, the source spills big transactions to its disk and "
                          "sends each at commit; status `streaming_in_use` shows which applies")
    partition_root: bool = Field(True, description="Name changes by the partitioned table "
                                                   "(publish_via_partition_root)")
    heartbeat_seconds: float = Field(10.0, gt=0, le=3600, allow_inf_nan=False,
                                     description="Interval of the heartbeat that keeps an idle "
                                                 "slot's WAL bounded")
    retention: RetentionIn = Field(default_factory=RetentionIn)
    failover: bool = Field(False, description="Create the slot with FAILOVER (PostgreSQL 17+) so "
                                              "standbys with `sync_replication_slots` keep a copy; "
                                              "name every host in the DSN (`host=a,b "
                                              "target_session_attrs=read-write`) and capture "
                                              "resumes on the promoted standby")
    keyless: Literal["refuse", "identity_full"] = Field(
        "refuse", description="A table PostgreSQL would refuse UPDATE and DELETE on once "
                              "published (no primary key, no replica identity): `refuse` the feed "
                              "(422 `table_without_replica_identity`), or `identity_full`: pgfeed "
                              "sets REPLICA IDENTITY FULL on it (whole old rows in WAL) and, for "
                              "a feed of all tables, installs an event trigger doing so for tables "
                              "created later (superuser only)")
    publish_generated_columns: bool = Field(
        False, description="PostgreSQL 18+: the publication pgfeed creates publishes stored "
                           "generated columns (`WITH (publish_generated_columns = stored)`); "
                           "refused (422) on older sources")
    backfill_attached: bool = Field(
        True, description="A partition attached (`ATTACH PARTITION`) with rows to a published "
                          "partitioned table is backfilled into the feed (with `partition_root`, "
                          "as the root's rows): attaching writes no change, so its rows would "
                          "otherwise never arrive. Detected within seconds")
    ddl: Literal["off", "capture"] = Field(
        "off", description="`capture`: pgfeed installs an event trigger on the source (superuser "
                           "only) that records each DDL command touching a table of the feed in a "
                           "feed-owned table, published by a feed-owned publication; each is "
                           "served as an `op: \"ddl\"` event at its position (command, object, "
                           "old and new names of a rename, the table's columns after it), and "
                           "schema versions say which column was renamed (`previous_name`). "
                           "Everything is dropped with the feed, and the trigger never makes the "
                           "application's DDL fail. `off`: schema changes are derived from "
                           "Relation messages (a rename reads as a drop and an add)")


# A `schema.table` name (a bare name means public): non-blank, at most 200 characters. The pattern
# is a search, as in JSON Schema: some non-space character.
TableName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"\S",
                                 description="`schema.table` (a bare name is in `public`)")]


class TableEntry(BaseModel):
    """A table of a publication pgfeed creates, with what of it to publish (PostgreSQL 15+)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "table": "public.orders", "where": "region = 'eu'", "columns": ["id", "region", "total"]}]})

    table: TableName
    where: str | None = Field(None, min_length=1, max_length=10_000,
                              description="Row filter: a boolean SQL expression over the table's "
                                          "columns (`CREATE PUBLICATION ... WHERE (expr)`), "
                                          "validated by PostgreSQL; for UPDATE and DELETE to keep "
                                          "working it may read only replica identity columns "
                                          "(or the table is REPLICA IDENTITY FULL)")
    columns: list[Annotated[str, Field(min_length=1, max_length=63)]] | None = Field(
        None, min_length=1, max_length=1600,
        description="Column list: only these columns are published (exact names); it must "
                    "include the replica identity's columns")


def table_names(tables: list[str | TableEntry]) -> tuple[tuple[str, ...], tuple[PublishedTable, ...]]:
    """``tables`` as given (names or entries): the names, and the filters of those that have one."""
    names, filters = [], []
    for t in tables:
        if isinstance(t, str):
            names.append(t.strip())
            continue
        name = t.table.strip()
        names.append(name)
        if t.where is not None or t.columns is not None:
            filters.append(PublishedTable(name, t.where,
                                          None if t.columns is None else tuple(t.columns)))
    if len({f.table for f in filters}) < len(filters):
        raise ValueError("a table may be given once with 'where'/'columns'")
    return tuple(dict.fromkeys(names)), tuple(filters)


class FeedCreate(BaseModel):
    """`POST /v1/feeds`: a source, what to capture, and options."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "name": "shop", "dsn": "host=db.example dbname=shop user=cdc",
        "tables": ["public.orders", "public.items"], "publication": None, "slot": None,
        "options": {"toast": "placeholder", "snapshot": "never", "messages": False,
                    "two_phase": False, "streaming": True, "partition_root": True,
                    "heartbeat_seconds": 10, "retention": {"hours": 168, "bytes": None}}}]})

    name: str = Field(pattern=f"^{NAME_RE.pattern}$", min_length=1, max_length=48,
                      description="Lowercase letters, digits and underscores, starting with a letter")
    dsn: str = Field(min_length=1, max_length=4096, json_schema_extra={"format": "password",
                                                                        "writeOnly": True},
                     description="libpq connection string or URI of the source (never echoed back; "
                                 "status shows it with the password masked)")
    tables: list[TableName | TableEntry] = Field(
        default_factory=list, max_length=10_000,
        description="`schema.table` names to capture (a publication pgfeed creates; not with "
                    "`publication`), or objects `{table, where, columns}` giving a table's row "
                    "filter and column list (PostgreSQL 15+)")
    all_tables: bool = False
    publication: str | None = Field(None, min_length=1, max_length=63,
                                    description="Adopt this existing publication as it is, without "
                                                "`tables` or `all_tables` (status shows the tables "
                                                "it publishes); null: pgfeed creates and owns one")
    slot: str | None = Field(None, min_length=1, max_length=63,
                             description="Adopt this existing slot (null: pgfeed creates and owns one)")
    options: FeedOptionsIn = Field(default_factory=FeedOptionsIn)

    @model_validator(mode="after")
    def _what_to_capture(self) -> FeedCreate:
        if self.all_tables and self.tables:
            raise ValueError("give either 'tables' or 'all_tables': true, not both")
        if not self.all_tables and not self.tables and self.publication is None:
            raise ValueError("a feed needs 'tables', 'all_tables': true, or an existing 'publication'")
        if self.publication is not None and (self.tables or self.all_tables):
            raise ValueError(ADOPTED_TABLES)
        return self


class FeedUpdate(BaseModel):
    """`PATCH /v1/feeds/{feed}`: the new table list of a feed whose publication pgfeed owns."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "tables": ["public.orders", "public.items", "public.refunds"]}]})

    tables: list[TableName | TableEntry] = Field(
        min_length=1, max_length=10_000,
        description="`schema.table` names or `{table, where, columns}` objects: replaces the "
                    "feed's list (a table given without `where`/`columns` publishes every row "
                    "and column)")
    backfill: bool = Field(False, description="Backfill the tables this adds to the list")


class SlotRiskOut(BaseModel):
    wal_status: str | None = Field(None, description="pg_replication_slots.wal_status")
    safe_wal_size: int | None = None
    retained_bytes: int | None = Field(None, description="Bytes between the slot's restart_lsn "
                                                         "and the server's current LSN")


class LogOut(BaseModel):
    transaction_count: int
    change_count: int
    payload_bytes: int
    oldest_lsn: str
    trimmed_lsn: str
    forced_trims: int


class StandbySlotOut(BaseModel):
    name: str = Field(description="A physical slot named in `synchronized_standby_slots`")
    exists: bool
    active: bool = Field(description="A standby streams from it now")
    restart_lsn: str | None = None
    caught_up: bool = Field(description="The standby has the WAL up to the feed's confirmed "
                                        "position")


class FailoverOut(BaseModel):
    """The slot's failover state as the source sees it (PostgreSQL 17+). A primary cannot see a
    standby's copy of the slot: `ready` says the slot has FAILOVER and every standby slot the
    source waits for (`synchronized_standby_slots`) is streaming and caught up."""

    enabled: bool = Field(description="pg_replication_slots.failover")
    synced: bool = Field(description="The slot is a standby's synchronized copy (true only when "
                                     "the DSN reached a standby)")
    standby_slots: list[StandbySlotOut]
    ready: bool
    note: str | None = Field(None, description="What is missing when not ready")


class LeaderOut(BaseModel):
    """The replica capturing a feed (PostgreSQL store): its id, lease epoch and since when."""

    replica: str
    epoch: int
    since: str  # ISO 8601 UTC


class ReplicaOut(BaseModel):
    id: str
    started_at: str
    heartbeat_at: str  # ISO 8601 UTC, the store's clock
    age_seconds: float
    alive: bool
    leads: list[str]


class ReplicaList(BaseModel):
    replicas: list[ReplicaOut]


class RetentionOut(BaseModel):
    hours: float | None
    bytes: int | None
    consumer_max_idle_hours: float | None


class FeedOptionsOut(BaseModel):
    toast: str
    snapshot: str
    messages: bool
    two_phase: bool
    streaming: bool
    partition_root: bool
    heartbeat_seconds: float
    retention: RetentionOut
    failover: bool = False
    keyless: str = "refuse"
    publish_generated_columns: bool = False
    backfill_attached: bool = True
    ddl: str = "off"


class PublishedOut(BaseModel):
    table: str
    where: str | None = Field(None, description="The row filter as the source reports it "
                                                "(`pg_publication_tables.rowfilter`)")
    columns: list[str] | None = Field(None, description="The published columns "
                                                        "(`pg_publication_tables.attnames`, "
                                                        "PostgreSQL 15+)")


class BackfillCreate(BaseModel):
    """`POST /v1/feeds/{feed}/backfills`: the tables to read into the feed, and how."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "tables": ["public.orders"], "chunk_rows": 10000, "parallel": 2}]})

    tables: list[TableName] = Field(min_length=1, max_length=1000,
                                    description="`schema.table` names, each in the feed's publication")
    chunk_rows: int = Field(10_000, ge=1, le=1_000_000, description="Rows read per chunk (one "
                                                                     "short transaction each)")
    parallel: int = Field(2, ge=1, le=16, description="Source connections reading at once "
                                                      "(several tables, or key ranges of one)")


class BackfillTableOut(BaseModel):
    table: str
    parts: int = Field(description="Key ranges the table is read in")
    rows: int = Field(description="Rows stored so far")
    chunks: int
    estimate_left: int = Field(description="Rows still to read, estimated (pg_class.reltuples)")
    done: bool
    state: Literal["running", "done", "cancelled", "failed"] = Field(
        "running", description="The table's own state: a table fails or is cancelled alone "
                               "while the others go on, and can be retried alone "
                               "(`POST …/tables/{table}/retry`)")
    error: str | None = Field(None, description="Why the table failed (`failed`)")


class BackfillOut(BaseModel):
    """A backfill's state and progress (durable, with the chunks) plus this process's rate."""

    id: str
    state: Literal["running", "done", "cancelled", "failed"] = Field(
        description="Derived from the tables' states: `running` while any table runs; `done` "
                    "when every table is done; once none runs, `failed` if a table failed "
                    "(the others may be done: see `tables[].state`), else `cancelled`")
    tables: list[BackfillTableOut]
    rows: int
    chunks: int
    estimate_left: int
    rows_per_second: float
    eta_seconds: float | None = Field(None, description="At the current rate; null when unknown")
    chunk_rows: int
    parallel: int
    initial: bool = Field(description="The feed's initial snapshot (option `snapshot`)")
    redone_chunks: int = Field(description="Chunks read again in this process (a TRUNCATE or "
                                           "schema change in their window, ...)")
    last_error: str | None = None
    created_at: float
    finished_at: float | None = None


class BackfillList(BaseModel):
    backfills: list[BackfillOut]


class SlotLostOut(BaseModel):
    """The feed's slot is gone (issue 26): changes after `last_lsn` were lost. The feed stays
    `failed` (across restarts) until `POST /v1/feeds/{feed}/resync`."""

    at: str = Field(description="When pgfeed found it (ISO 8601 UTC)")
    slot: str
    reason: str = Field(description="`dropped`, or `invalidated: <why>` (max_slot_wal_keep_size, "
                                    "idle_replication_slot_timeout, a standby's conflict, ...)")
    last_lsn: str = Field(description="The feed's confirmed position then: nothing after it was "
                                      "captured")


class GapOut(BaseModel):
    """A discontinuity a resync marked: changes committed after `lost_after` and before
    `resumed_at` never reached the feed. The marker (a transaction with origin `pgfeed.resync`:
    one `truncate` of the feed's tables) sits at `marker`; a backfill's `read`s follow it."""

    lost_after: str
    resumed_at: str
    marker: str = Field(description="Commit LSN of the marker transaction (a cursor)")
    reason: str
    at: str = Field(description="When the resync ran (ISO 8601 UTC)")


class ResyncOut(BaseModel):
    """What `POST /v1/feeds/{feed}/resync` did."""

    feed: str
    slot: str
    dropped_slot: bool = Field(description="The dead slot still existed on the source and was "
                                           "dropped")
    created_slot: bool = True
    gap: GapOut
    tables: list[str] = Field(description="Tables the marker truncates and the backfill reads")
    backfill: str | None = Field(None, description="Id of the backfill that rebuilds the tables "
                                                   "(see /v1/feeds/{feed}/backfills)")
    backfill_error: str | None = Field(None, description="Why no backfill could start (a table "
                                                         "without a key, ...)")
    message: str = Field(description="What was done, in one sentence")


class FeedPublic(BaseModel):
    """A feed's definition and status. The source DSN is shown with its password masked."""

    name: str
    state: Literal["starting", "snapshotting", "running", "reconnecting", "paused", "failed"] = Field(
        description="`reconnecting`: the source does not answer (see `last_error`, "
                    "`next_attempt_at`); `failed`: see `last_error` and `slot_lost`")
    source: str
    slot: str
    publication: str
    owns_slot: bool
    owns_publication: bool
    tables: list[str]
    all_tables: bool
    options: FeedOptionsOut
    confirmed_lsn: str
    head_lsn: str
    server_lsn: str | None = None
    lag_bytes: int | None = None
    lag_seconds: float | None = None
    changes_per_second: float = Field(description="Live changes a second over the last ~10 s "
                                                  "(backfill rows are not counted here)")
    changes_captured: int = Field(description="Live changes stored since this process started "
                                              "capturing (backfill rows apart)")
    bytes_captured: int
    backfill_rows_captured: int = Field(0, description="Rows backfills stored through this "
                                                       "process's capture (op `read`)")
    last_error: str | None = None
    proto_version: int | None = None
    streaming_in_use: bool | None = Field(
        None, description="Whether big transactions are streamed from the source before their "
                          "commit (true by default); false with `messages` on, whatever "
                          "`options.streaming` says: the source's walsender then spills a "
                          "transaction past `logical_decoding_work_mem` to its own disk and "
                          "sends it at commit (see the `messages` option); null until capture "
                          "has connected")
    slot_risk: SlotRiskOut
    failover: FailoverOut | None = Field(None, description="PostgreSQL 17+ sources, when probed")
    log: LogOut | None = None
    consumers: list[ConsumerOut] = Field(default_factory=list)
    leader: LeaderOut | None = None
    counters_from: str | None = Field(
        None, description="Whose capture counters (`changes_per_second`, `changes_captured`, "
                          "`bytes_captured`, `proto_version`, `streaming_in_use`) these are "
                          "(PostgreSQL store): the answering replica's id when it captures the "
                          "feed, else the replica that last reported them to the store")
    counters_at: str | None = Field(None, description="When `counters_from` reported them (ISO "
                                                      "8601 UTC); null: live, this replica's")
    backfills: list[BackfillOut] = Field(
        default_factory=list, description="Running backfills, and the initial snapshot's (option "
                                          "`snapshot`) until it is done: a table it could not "
                                          "read is `failed` in its `tables` with why")
    slot_lost: SlotLostOut | None = Field(None, description="Set when the slot was dropped or "
                                                            "invalidated: changes were lost")
    gaps: list[GapOut] = Field(default_factory=list, description="Gaps resyncs marked, oldest first")
    next_attempt_at: str | None = Field(None, description="`reconnecting`: when capture tries the "
                                                          "source again (ISO 8601 UTC)")
    unprotected_tables: list[str] | None = Field(
        None, description="Published tables on which PostgreSQL refuses UPDATE and DELETE now (no "
                          "primary key, no replica identity: the application's writes fail); "
                          "null when the source was not probed")
    identity_full: list[str] = Field(
        default_factory=list, description="Tables pgfeed gave REPLICA IDENTITY FULL when it created "
                                          "the feed (option `keyless`: `identity_full`); kept when "
                                          "the feed is deleted")
    published: list[PublishedOut] | None = Field(
        None, description="What the publication publishes, as the source reports it: per table "
                          "its row filter and column list (PostgreSQL 15+); null when the source "
                          "was not probed")
    publish_generated_columns: bool | None = Field(
        None, description="The publication's `publish_generated_columns` (PostgreSQL 18+; null "
                          "before, or when not probed)")
    keyless_guard: bool = Field(False, description="pgfeed installed the event trigger "
                                                   "`pgfeed_<name>_keyless` that gives tables created "
                                                   "later without a key REPLICA IDENTITY FULL "
                                                   "(dropped with the feed)")


class FindingOut(BaseModel):
    check: str = Field(description="What was checked (wal_level, replication, replica_identity, ...)")
    level: Literal["ok", "warning", "error"]
    message: str
    fix: str | None = Field(None, description="The SQL or setting to change")


class CheckOut(BaseModel):
    """`POST /v1/feeds?dry_run=true`: what creating the feed would find; nothing is created."""

    ok: bool = Field(description="No error: the feed would be created")
    findings: list[FindingOut]


class FeedList(BaseModel):
    feeds: list[FeedPublic]


class SequenceOut(BaseModel):
    sequence: str = Field(description="`schema.name` of the sequence")
    table: str = Field(description="`schema.table` whose column owns it")
    column: str
    kind: Literal["serial", "identity"] = Field(description="`serial` (OWNED BY) or `identity`")
    increment_by: int
    last_value: int | None = Field(description="The last value handed out; null when never used "
                                               "or when the feed's role may not read it")
    next_value: int | None = Field(description="What a target sequence should hand out next: "
                                               "`setval(seq, next_value, false)`")
    readable: bool = Field(description="Whether the feed's role may read the sequence")


class SequencesOut(BaseModel):
    read_at: str = Field(description="WAL position read before the values: every change of the "
                                     "feed committed before it holds values up to `last_value` "
                                     "(ascending sequences), so once a mirror holds the feed up "
                                     "to here, `next_value` cannot collide with a mirrored row")
    sequences: list[SequenceOut]
    message_lsn: str | None = Field(None, description="POST only: the LSN of the `message` event "
                                                      "(prefix `pgfeed.sequences`, content this "
                                                      "snapshot's JSON) written into the feed")


class Health(BaseModel):
    status: str
