"""Feed definitions and status: what a feed captures, how, and how it is doing."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pgfeed.decoding.changes import ToastMode
from pgfeed.replication.slots import PublishedTable, SlotFailover

# reconnecting: the source (or a shared store) does not answer; capture retries about every second.
FeedState = Literal["starting", "snapshotting", "running", "reconnecting", "paused", "failed"]
NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,47}")
ADOPTED_TABLES = ("'tables' and 'all_tables' describe a publication pgfeed creates; an existing "
                  "'publication' is adopted as it is (the feed's status shows the tables it "
                  "publishes): leave them out, or change the publication on the source")


@dataclass(frozen=True, slots=True)
class Retention:
    hours: float | None = 168.0
    bytes: int | None = None
    # A named consumer that has not acknowledged for this long expires (is deleted), so a reader
    # that went away cannot hold the log forever; None: consumers never expire.
    consumer_max_idle_hours: float | None = 168.0


@dataclass(frozen=True, slots=True)
class FeedOptions:
    toast: ToastMode = "placeholder"
    snapshot: Literal["never", "backfill", "export"] = "never"  # export: older name of backfill
    # Opt-in (issue 28.2): with messages on the walsender does not stream in-progress
    # transactions (docs/design.md, "Logical messages turn streaming off").
    messages: bool = False
    two_phase: bool = False
    streaming: bool = True
    partition_root: bool = True
    heartbeat_seconds: float = 10.0
    retention: Retention = field(default_factory=Retention)
    # The slot is created with FAILOVER (PostgreSQL 17+): standbys with sync_replication_slots
    # keep a copy, so capture resumes on a promoted standby (docs/failover.md).
    failover: bool = False
    # A table PostgreSQL would refuse UPDATE/DELETE on once published (no key, no replica
    # identity): "refuse" the feed, or "identity_full": pgfeed gives it REPLICA IDENTITY FULL
    # (and, for a feed of all tables, installs an event trigger doing so for tables created later).
    keyless: Literal["refuse", "identity_full"] = "refuse"
    # PostgreSQL 18+: the publication pgfeed creates publishes stored generated columns
    # (WITH (publish_generated_columns = stored)); refused on older sources (issue 27.5).
    publish_generated_columns: bool = False
    # Issue 28.5: a partition attached (ATTACH PARTITION) with rows to a published partitioned
    # table is backfilled (with publish_via_partition_root its rows are served as the root's):
    # its rows would otherwise never reach the feed (attaching writes no change).
    backfill_attached: bool = True
    # Issue 27.2: "capture" installs an event trigger on the source that records each DDL command
    # touching a table of the feed (superuser only); served as op "ddl" events at their position.
    ddl: Literal["off", "capture"] = "off"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FeedOptions:
        data = dict(data)
        retention = data.pop("retention", None)
        return cls(**data, retention=Retention(**retention) if retention else Retention())


@dataclass(frozen=True, slots=True)
class SlotLost:
    """The feed's slot is gone (dropped) or invalidated: changes after ``last_lsn`` were lost.
    Persisted with the feed (a restart keeps it failed) until ``pgfeed feeds resync``."""

    at: float  # Unix seconds when pgfeed found it
    reason: str  # "dropped" or "invalidated: <why>" (issue 26)
    last_lsn: int  # the feed's confirmed position then: nothing after it was captured
    slot: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SlotLost:
        return cls(**data)


@dataclass(frozen=True, slots=True)
class Gap:
    """A resync's discontinuity: changes committed after ``lost_after`` and before ``resumed_at``
    never reached the feed; the marker transaction (origin ``pgfeed.resync``) sits at
    ``resumed_at - 1`` and a backfill rebuilt the tables after it."""

    lost_after: int
    resumed_at: int
    reason: str
    at: float  # Unix seconds of the resync
    marker_lsn: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Gap:
        return cls(**data)


@dataclass(frozen=True, slots=True)
class FeedSpec:
    """A feed as created (``POST /v1/feeds``); persisted in the catalogue.

    ``slot``/``publication`` None means pgfeed creates and owns them (named ``pgfeed_<name>``);
    named existing ones are adopted and never dropped by pgfeed.
    """

    name: str
    dsn: str
    tables: tuple[str, ...] = ()
    all_tables: bool = False
    publication: str | None = None
    slot: str | None = None
    options: FeedOptions = field(default_factory=FeedOptions)
    owns_slot: bool = True
    owns_publication: bool = True
    # Issue 26: kept with the definition so that every store persists them (state, not options).
    slot_lost: SlotLost | None = None
    gaps: tuple[Gap, ...] = ()
    # What creation did with option keyless "identity_full": the tables it gave REPLICA IDENTITY
    # FULL (kept when the feed goes), and whether it installed the event trigger
    # pgfeed_<name>_keyless (dropped with the feed).
    identity_full: tuple[str, ...] = ()
    keyless_guard: bool = False
    # What creation did with option ddl "capture": installed the DDL capture objects
    # (``replication.ddl``; dropped with the feed), and made schema pgfeed for them.
    ddl_capture: bool = False
    ddl_schema: bool = False
    # Issue 27.5: the row filter and column list of each table of ``tables`` that has one
    # (PostgreSQL 15+), for the publication pgfeed creates. ``tables`` stays the list of names.
    table_filters: tuple[PublishedTable, ...] = ()
    # Issue 28.5: the leaf partitions (oids) of the published tables as last seen (at creation,
    # then by the supervisor's periodic check); one that appears later was attached (or created)
    # and is backfilled when it has rows (option backfill_attached). None: never listed (a feed
    # made before 28.5): the first check only lists them.
    partitions: tuple[int, ...] | None = None

    @property
    def filters_by_name(self) -> dict[str, PublishedTable]:
        return {f.table: f for f in self.table_filters}

    @property
    def slot_name(self) -> str:
        return self.slot or f"pgfeed_{self.name}"

    @property
    def publication_name(self) -> str:
        return self.publication or f"pgfeed_{self.name}"

    @property
    def ddl_table(self) -> str | None:
        """``schema.table`` of the feed's DDL table when it captures DDL (served as op "ddl")."""
        return f"pgfeed.{self.name}_ddl" if self.ddl_capture else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FeedSpec:
        data = dict(data)
        options = FeedOptions.from_dict(data.pop("options", None) or {})
        lost = data.pop("slot_lost", None)
        gaps = tuple(Gap.from_dict(g) for g in data.pop("gaps", None) or ())
        filters = tuple(PublishedTable.from_dict(f) for f in data.pop("table_filters", None) or ())
        if data.get("partitions") is not None:
            data["partitions"] = tuple(data["partitions"])
        return cls(**{**data, "tables": tuple(data.get("tables") or ()), "table_filters": filters,
                      "identity_full": tuple(data.get("identity_full") or ())}, options=options,
                   slot_lost=SlotLost.from_dict(lost) if lost else None, gaps=gaps)


@dataclass(slots=True)
class SlotRisk:
    wal_status: str | None = None
    safe_wal_size: int | None = None
    retained_bytes: int | None = None  # bytes between restart_lsn and the server's current LSN


@dataclass(frozen=True, slots=True)
class Leader:
    """The replica capturing a feed (shared store): its id, lease epoch and since when (Unix s)."""

    replica: str
    epoch: int
    since: float


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A replica sharing the store: heartbeat times in Unix seconds, the feeds it leads."""

    id: str
    started_at: float
    heartbeat_at: float
    age_seconds: float
    alive: bool
    leads: list[str]


@dataclass(slots=True)
class FeedStatus:
    name: str
    state: FeedState
    slot: str
    publication: str
    tables: list[str]
    all_tables: bool
    confirmed_lsn: int = 0
    head_lsn: int = 0
    server_lsn: int | None = None
    lag_bytes: int | None = None
    lag_seconds: float | None = None
    changes_per_second: float = 0.0
    changes_captured: int = 0
    bytes_captured: int = 0
    backfill_rows_captured: int = 0  # backfill rows stored (not in changes_*: issue 30.1)
    reconnects: int = 0  # times capture lost its source and connected again (this process)
    last_error: str | None = None
    proto_version: int | None = None
    streaming_in_use: bool | None = None  # None until capture has connected
    slot_risk: SlotRisk = field(default_factory=SlotRisk)
    source: str = ""  # DSN with the password masked; never the secret
    leader: Leader | None = None  # shared store only
    failover: SlotFailover | None = None  # PostgreSQL 17+ sources, when probed
    # Whose capture counters (rate, totals, proto_version, streaming_in_use) these are: this
    # replica's id when it captures, else the replica that last reported them to the store
    # (shared store; None when nobody has yet).
    counters_from: str | None = None
    counters_at: float | None = None  # when they were reported (Unix s); None: live, this replica
    slot_lost: SlotLost | None = None  # issue 26: the slot is gone; state is failed
    gaps: tuple[Gap, ...] = ()
    next_attempt_at: float | None = None  # reconnecting: when capture tries again (Unix s)
    # Leaf tables of the publication on which PostgreSQL refuses UPDATE/DELETE now (no usable
    # replica identity), when probed; None: not probed.
    unprotected_tables: list[str] | None = None
    # What the publication publishes, as the source reports it (issue 27.5): per table its row
    # filter and column list, and publish_generated_columns (PostgreSQL 18+); None: not probed.
    published: list[PublishedTable] | None = None
    publish_generated_columns: bool | None = None
