"""A feed's work on its source: set up and drop its publication and slot, change its tables, free
its slot for a new leader, and probe it for status. Each call opens one admin connection
(``replication.connect.admin_connection``: one timeout policy, errors without the password).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pgfeed.backfill.manager import BackfillSource
from pgfeed.errors import SourceError
from pgfeed.feeds.model import FeedSpec
from pgfeed.replication import sequences as seqs
from pgfeed.replication import slots
from pgfeed.replication.capture import CaptureConfig
from pgfeed.replication.commands import source_refusal
from pgfeed.replication.connect import admin_connection
from pgfeed.replication.stream import create_slot

__all__ = ["backfill_source", "capture_config", "drop", "free_slot", "prepare", "probe", "published_tables",
           "sequences", "set_tables"]


def capture_config(spec: FeedSpec) -> CaptureConfig:
    """What the feed's capture needs to know of it."""
    options = spec.options
    return CaptureConfig(name=spec.name, dsn=spec.dsn, slot=spec.slot_name,
                         publication=spec.publication_name, streaming=options.streaming,
                         messages=options.messages, two_phase=options.two_phase,
                         heartbeat_seconds=options.heartbeat_seconds, failover=options.failover)


def backfill_source(spec: FeedSpec) -> BackfillSource:
    """What the feed's backfills need to know of it."""
    return BackfillSource(spec.name, spec.dsn, spec.publication_name, spec.options.messages)


def prepare(spec: FeedSpec) -> FeedSpec:
    """Check the source, create (or adopt) the publication and the slot; the spec as created
    (an adopted publication's tables, who owns what). SourceError says what the source refused."""
    owns_pub = spec.publication is None
    owns_slot = spec.slot is None
    with admin_connection(spec.dsn, "source refused feed setup") as conn:
        refusal = source_refusal(conn.info.server_version, two_phase=spec.options.two_phase,
                                 failover=spec.options.failover)
        if refusal:
            raise SourceError(refusal)
        if owns_pub:
            slots.ensure_publication(conn, spec.publication_name, tables=list(spec.tables),
                                     all_tables=spec.all_tables,
                                     partition_root=spec.options.partition_root)
        else:  # adopted as it is: the feed shows what it really publishes
            held = slots.publication_tables(conn, spec.publication_name)
            if held is None:
                raise SourceError(f"publication {spec.publication_name!r} does not exist on the source")
            spec = replace(spec, all_tables=held[0], tables=held[1])
        exists = slots.slot_exists(conn, spec.slot_name)
        adopted = slots.failover_info(conn, spec.slot_name) if exists else None
    if owns_slot and exists:
        raise SourceError(f"replication slot {spec.slot_name!r} already exists on the source; "
                          "name it as 'slot' to adopt it")
    if not owns_slot and not exists:
        raise SourceError(f"replication slot {spec.slot_name!r} does not exist on the source")
    if not owns_slot and spec.options.failover and not (adopted and adopted.enabled):
        raise SourceError(f"replication slot {spec.slot_name!r} is not a failover slot: make it one "
                          "on the source (ALTER_REPLICATION_SLOT ... (FAILOVER true)) or leave "
                          "option failover off")
    if owns_slot:
        create_slot(spec.dsn, spec.slot_name, snapshot="nothing", two_phase=spec.options.two_phase,
                    failover=spec.options.failover)
    return replace(spec, owns_slot=owns_slot, owns_publication=owns_pub)


def drop(spec: FeedSpec) -> None:
    """Drop the slot and the publication that pgfeed owns (adopted ones stay)."""
    with admin_connection(spec.dsn, "the source refused") as conn:
        if spec.owns_slot:
            slots.drop_slot(conn, spec.slot_name)
        if spec.owns_publication:
            slots.drop_publication(conn, spec.publication_name)


def set_tables(spec: FeedSpec, tables: tuple[str, ...]) -> None:
    """``ALTER PUBLICATION ... SET TABLE`` on the publication the feed owns."""
    with admin_connection(spec.dsn, "source refused the table list") as conn:
        slots.set_publication_tables(conn, spec.publication_name, tables)


def published_tables(spec: FeedSpec) -> list[str]:
    """The quoted names of the tables the feed's publication holds (its initial backfill)."""
    with admin_connection(spec.dsn, "cannot list the publication's tables") as conn:
        return slots.quoted_publication_tables(conn, spec.publication_name)


def free_slot(spec: FeedSpec) -> None:
    """End a walsender that still holds the feed's slot (a previous leader's)."""
    with admin_connection(spec.dsn, f"cannot free slot {spec.slot_name!r}") as conn:
        slots.free_slot(conn, spec.slot_name)


def probe(spec: FeedSpec) -> tuple[dict[str, Any] | None, tuple[bool, tuple[str, ...]] | None,
                                   slots.SlotFailover | None]:
    """The slot's position and risk (``slots.slot_info``), for an adopted publication what it
    publishes now (``(all_tables, tables)``; None for one pgfeed owns), and the slot's failover
    state (PostgreSQL 17+; ``slots.failover_info``)."""
    with admin_connection(spec.dsn, "source unreachable") as conn:
        info = slots.slot_info(conn, spec.slot_name)
        held = None if spec.owns_publication else slots.publication_tables(conn, spec.publication_name)
        failover = slots.failover_info(conn, spec.slot_name)
    return info, held, failover


def sequences(spec: FeedSpec, *, emit: bool = False) -> tuple[seqs.SequenceSnapshot, int | None]:
    """The feed's tables' sequences with the position they cover (``replication.sequences``);
    with ``emit``, also written into the WAL as a message the feed serves (its LSN returned)."""
    with admin_connection(spec.dsn, "cannot read the source's sequences") as conn:
        snapshot = seqs.read_sequences(conn, spec.publication_name)
        return snapshot, seqs.emit_snapshot(conn, snapshot) if emit else None
