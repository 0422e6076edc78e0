"""A feed's work on its source: set up and drop its publication and slot, change its tables, free
its slot for a new leader, and probe it for status. Each call opens one admin connection
(``replication.connect.admin_connection``: one timeout policy, errors without the password).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import psycopg

from pgfeed.backfill.manager import BackfillSource
from pgfeed.dsn import scrub
from pgfeed.errors import SourceError, SourceRefused
from pgfeed.feeds import partitions
from pgfeed.feeds.model import FeedSpec
from pgfeed.replication import ddl, identity, preflight, slots
from pgfeed.replication import sequences as seqs
from pgfeed.replication.capture import CaptureConfig
from pgfeed.replication.connect import admin_connection, one_line
from pgfeed.replication.schemanotes import ddl_table_name
from pgfeed.replication.stream import create_slot

__all__ = ["backfill_source", "capture_config", "check", "drop", "free_slot", "prepare", "probe",
           "published_tables", "refusal", "request", "sequences", "set_tables", "undo"]


def capture_config(spec: FeedSpec) -> CaptureConfig:
    """What the feed's capture needs to know of it."""
    options = spec.options
    return CaptureConfig(name=spec.name, dsn=spec.dsn, slot=spec.slot_name,
                         publication=spec.publication_name, streaming=options.streaming,
                         messages=options.messages, two_phase=options.two_phase,
                         heartbeat_seconds=options.heartbeat_seconds, failover=options.failover,
                         ddl_table=ddl_table_name(spec.name) if spec.ddl_capture else None,
                         extra_publications=(ddl.publication_name(spec.name),)
                         if spec.ddl_capture else ())


def backfill_source(spec: FeedSpec) -> BackfillSource:
    """What the feed's backfills need to know of it."""
    return BackfillSource(spec.name, spec.dsn, spec.publication_name)


def request(spec: FeedSpec) -> preflight.Request:
    """What the feed asks of its source, for the preflight."""
    return preflight.Request(name=spec.name, tables=spec.tables, all_tables=spec.all_tables,
                             publication=spec.publication, slot=spec.slot,
                             two_phase=spec.options.two_phase, failover=spec.options.failover,
                             keyless=spec.options.keyless, filters=spec.table_filters,
                             generated_columns=spec.options.publish_generated_columns,
                             partition_root=spec.options.partition_root,
                             ddl=spec.options.ddl == "capture")


def check(spec: FeedSpec) -> list[preflight.Finding]:
    """The preflight's findings for the feed (nothing is created); SourceError when the source
    cannot be reached."""
    with admin_connection(spec.dsn, "checking the source failed") as conn:
        return preflight.run(conn, request(spec))


def refusal(spec: FeedSpec, findings: list[preflight.Finding]) -> SourceRefused | None:
    """The error refusing the feed when the preflight found errors (None: none found)."""
    errors = [f for f in findings if f.level == "error"]
    if not errors:
        return None
    code = ("table_without_replica_identity" if any(f.check == "replica_identity" for f in errors)
            else "invalid_table_filter" if any(f.check in ("row_filter", "column_list") for f in errors)
            else "source_error")
    detail = "; ".join(f"{f.message} (fix: {f.fix})" if f.fix else f.message for f in errors)
    return SourceRefused(f"feed {spec.name!r} not created, nothing changed on the source: {detail}",
                         code=code, findings=[asdict(f) for f in errors])


def prepare(spec: FeedSpec) -> FeedSpec:
    """Check the source (``preflight``), then create (or adopt) the publication and the slot;
    the spec as created (an adopted publication's tables, who owns what, what option keyless
    changed). All or nothing: a step that fails undoes what the earlier ones made (never a slot
    or publication pgfeed did not create) and SourceRefused says which step failed."""
    owns_pub = spec.publication is None
    owns_slot = spec.slot is None
    with admin_connection(spec.dsn, "checking the source failed") as conn:
        facts = preflight.gather(conn, request(spec))
        refused = refusal(spec, preflight.judge(facts, request(spec)))
        if refused is not None:
            raise refused
        if not owns_pub:  # adopted as it is: the feed shows what it really publishes
            held = slots.publication_tables(conn, spec.publication_name)
            if held is None:
                raise SourceError(f"publication {spec.publication_name!r} does not exist on the source")
            spec = replace(spec, all_tables=held[0], tables=held[1])
    consent = spec.options.keyless == "identity_full"
    full = tuple(t.name for t in facts.tables if t.kind == "table" and not t.protected) \
        if owns_pub and consent else ()
    guard = owns_pub and consent and spec.all_tables and facts.superuser
    spec = replace(spec, owns_slot=owns_slot, owns_publication=owns_pub, identity_full=full,
                   keyless_guard=guard, ddl_capture=spec.options.ddl == "capture")
    if owns_pub or spec.ddl_capture:
        spec = _publish(spec)
    spec = _baseline(spec)
    if owns_slot:
        try:
            create_slot(spec.dsn, spec.slot_name, snapshot="nothing",
                        two_phase=spec.options.two_phase, failover=spec.options.failover)
        except SourceError as exc:
            failed = f"creating replication slot {spec.slot_name!r} failed: {exc}"
            raise SourceRefused(failed + undo(replace(spec, owns_slot=False))) from None
    return spec


def _baseline(spec: FeedSpec) -> FeedSpec:
    """The published leaf partitions as the feed starts (before its slot: one attached between
    this list and the slot is found later and backfilled). Not listed (the source did not
    answer): the supervisor's first check lists them."""
    try:
        return replace(spec, partitions=partitions.list_leaves(spec.dsn, spec.publication_name,
                                                              None).oids)
    except SourceError:
        return spec


def _publish(spec: FeedSpec) -> FeedSpec:
    """One transaction: REPLICA IDENTITY FULL where consented, the publication, the event
    triggers (keyless guard, DDL capture)."""
    step = "connecting to the source"
    try:
        with admin_connection(spec.dsn, "the source refused") as conn, conn.transaction():
            if spec.identity_full:
                step = f"setting REPLICA IDENTITY FULL on {', '.join(spec.identity_full)}"
                identity.set_full(conn, spec.identity_full)
            step = f"creating publication {spec.publication_name!r}"
            if spec.owns_publication and not slots.ensure_publication(
                    conn, spec.publication_name, tables=list(spec.tables),
                    all_tables=spec.all_tables, partition_root=spec.options.partition_root,
                    filters=spec.filters_by_name,
                    generated_columns=spec.options.publish_generated_columns):
                raise SourceError("it exists already (made meanwhile by someone else)")
            if spec.keyless_guard:
                step = f"installing event trigger {identity.guard_name(spec.name)!r}"
                identity.install_guard(conn, spec.name)
            if spec.ddl_capture:
                step = f"installing DDL capture (event trigger {ddl.trigger_name(spec.name)!r})"
                spec = replace(spec, ddl_schema=ddl.install_capture(conn, spec.name,
                                                                    spec.publication_name))
    except psycopg.Error as exc:
        raise SourceRefused(f"{step} failed (nothing changed on the source): "
                            f"{one_line(scrub(str(exc), spec.dsn))}") from None
    except SourceError as exc:
        raise SourceRefused(f"{step} failed (nothing changed on the source): {exc}") from None
    return spec


def undo(spec: FeedSpec) -> str:
    """Drop what a creation made (the spec's owned slot and publication, its event trigger);
    identity changes stay. A sentence for the error: what was undone, or what is left."""
    try:
        drop(spec)
    except SourceError as exc:
        left = [f"publication {spec.publication_name!r}" if spec.owns_publication else "",
                f"slot {spec.slot_name!r}" if spec.owns_slot else "",
                f"event trigger {identity.guard_name(spec.name)!r}" if spec.keyless_guard else "",
                f"DDL capture (event trigger {ddl.trigger_name(spec.name)!r}, table "
                f"{spec.ddl_table!r}, publication {ddl.publication_name(spec.name)!r})"
                if spec.ddl_capture else ""]
        return (f"; undoing it failed too ({exc}): {', '.join(x for x in left if x)} left on the "
                "source: drop them there")
    kept = (f"; REPLICA IDENTITY FULL kept on {', '.join(spec.identity_full)}"
            if spec.identity_full else "")
    return f" (what it had made was dropped{kept})"


def drop(spec: FeedSpec) -> None:
    """Drop the slot and the publication that pgfeed owns (adopted ones stay), and the feed's
    event trigger."""
    with admin_connection(spec.dsn, "the source refused") as conn:
        if spec.owns_slot:
            slots.drop_slot(conn, spec.slot_name)
        if spec.owns_publication:
            slots.drop_publication(conn, spec.publication_name)
        if spec.keyless_guard:
            identity.drop_guard(conn, spec.name)
        if spec.ddl_capture:
            ddl.drop_capture(conn, spec.name, spec.ddl_schema)


def set_tables(spec: FeedSpec, tables: tuple[str, ...],
               filters: tuple[slots.PublishedTable, ...] = ()) -> tuple[str, ...]:
    """``ALTER PUBLICATION ... SET TABLE`` on the publication the feed owns, with each table's
    row filter and column list (``filters``). A table PostgreSQL would then refuse UPDATE/DELETE
    on (no identity, or a filter or column list its identity does not cover) is refused as at
    creation, or with option keyless ``identity_full`` given REPLICA IDENTITY FULL in the same
    transaction (returned)."""
    if filters:
        with admin_connection(spec.dsn, "checking the table filters failed") as conn:
            asked = preflight.Request(tables=tables, filters=filters, keyless=spec.options.keyless,
                                      partition_root=spec.options.partition_root,
                             ddl=spec.options.ddl == "capture")
            facts = preflight.Facts(server_version=conn.info.server_version, role="", database="",
                                    filters=preflight.gather_filters(conn, asked))
            errors = [f for f in preflight.filter_findings(facts, asked) if f.level == "error"]
        if errors:
            raise SourceRefused("table list not changed, nothing changed on the source: " + "; ".join(
                f"{f.message} (fix: {f.fix})" if f.fix else f.message for f in errors),
                code="invalid_table_filter", findings=[asdict(f) for f in errors])
    with admin_connection(spec.dsn, "source refused the table list") as conn, conn.transaction():
        pairs = [slots.split_table_name(t) for t in tables]
        unprotected = tuple(t.name for t in identity.named_tables(conn, pairs)[0]
                            if t.kind == "table" and not t.protected)
        if unprotected and spec.options.keyless != "identity_full":
            fixes = "; ".join(f"ALTER TABLE {t} REPLICA IDENTITY FULL" for t in unprotected)
            raise SourceRefused(
                f"once published, PostgreSQL would refuse every UPDATE and DELETE on "
                f"{', '.join(unprotected)} (no primary key or replica identity): the application's "
                f"writes would fail; fix: {fixes}; or add a primary key; or create the feed with "
                "option keyless: identity_full", code="table_without_replica_identity")
        identity.set_full(conn, unprotected)
        slots.set_publication_tables(conn, spec.publication_name, tables,
                                     {f.table: f for f in filters})
        if spec.ddl_capture:  # tables new to the feed: what their first captured DDL compares with
            ddl.baseline(conn, spec.name, spec.publication_name, pairs)
    return unprotected


def published_tables(spec: FeedSpec) -> list[str]:
    """The quoted names of the tables the feed's publication holds (its initial backfill)."""
    with admin_connection(spec.dsn, "cannot list the publication's tables") as conn:
        tables = slots.quoted_publication_tables(conn, spec.publication_name)
    if spec.ddl_capture:  # a feed of all tables holds its own DDL table: no rows of the feed
        own = f'"pgfeed"."{ddl_table_name(spec.name)}"'
        tables = [t for t in tables if t != own]
    return tables


def free_slot(spec: FeedSpec) -> None:
    """End a walsender that still holds the feed's slot (a previous leader's)."""
    with admin_connection(spec.dsn, f"cannot free slot {spec.slot_name!r}") as conn:
        slots.free_slot(conn, spec.slot_name)


Published = tuple[list[slots.PublishedTable], bool | None] | None


def probe(spec: FeedSpec) -> tuple[dict[str, Any] | None, tuple[bool, tuple[str, ...]] | None,
                                   slots.SlotFailover | None, list[str], Published]:
    """The slot's position and risk (``slots.slot_info``), for an adopted publication what it
    publishes now (``(all_tables, tables)``; None for one pgfeed owns), the slot's failover
    state (PostgreSQL 17+; ``slots.failover_info``) and the published tables on which
    PostgreSQL refuses UPDATE/DELETE (``identity.unprotected_in_publication``), and what the
    publication publishes (``slots.published``: row filters, column lists, generated columns)."""
    with admin_connection(spec.dsn, "source unreachable") as conn:
        info = slots.slot_info(conn, spec.slot_name)
        held = None if spec.owns_publication else slots.publication_tables(conn, spec.publication_name)
        failover = slots.failover_info(conn, spec.slot_name)
        unprotected = identity.unprotected_in_publication(conn, spec.publication_name)
        detail = slots.published(conn, spec.publication_name)
    return info, held, failover, unprotected, detail


def sequences(spec: FeedSpec, *, emit: bool = False) -> tuple[seqs.SequenceSnapshot, int | None]:
    """The feed's tables' sequences with the position they cover (``replication.sequences``);
    with ``emit``, also written into the WAL as a message the feed serves (its LSN returned)."""
    with admin_connection(spec.dsn, "cannot read the source's sequences") as conn:
        snapshot = seqs.read_sequences(conn, spec.publication_name)
        return snapshot, seqs.emit_snapshot(conn, snapshot) if emit else None
