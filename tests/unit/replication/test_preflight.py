"""The preflight's findings for source states the shared test clusters cannot take (wal_level
replica, no headroom, invalidation settings, managed-service roles): ``judge`` is pure."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pgfeed.replication.identity import TableIdentity
from pgfeed.replication.preflight import (
    Facts,
    FilterFacts,
    Finding,
    LeafIdentity,
    Request,
    judge,
    render,
)
from pgfeed.replication.slots import PublishedTable, row_filter_sql

GOOD = Facts(server_version=150004, role="cdc", database="shop", superuser=False, replication=True,
             max_slot_wal_keep_mb=10240,
             tables=(TableIdentity("public.orders", "table", "default", True, True, True),))
ASK = Request(name="shop", tables=("public.orders",))


def _errors(facts: Facts, request: Request = ASK) -> list[tuple[str, str | None]]:
    return [(f.check, f.fix) for f in judge(facts, request) if f.level == "error"]


def _one(facts: Facts, check: str, request: Request = ASK) -> Finding:
    found = [f for f in judge(facts, request) if f.check == check]
    assert len(found) == 1, found
    return found[0]


def test_a_ready_source_has_no_error() -> None:
    assert _errors(GOOD) == []
    assert _one(GOOD, "server_version").message == (
        "PostgreSQL 15.4: two_phase yes, failover no (17+), row filters and column lists yes, "
        "publish_generated_columns no (18+)")


def test_wal_level_replica_is_an_error_with_its_fix() -> None:
    assert _errors(replace(GOOD, wal_level="replica")) == [
        ("wal_level", "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL")]


def test_replication_from_the_attribute_a_superuser_or_a_managed_role() -> None:
    bare = replace(GOOD, replication=False)
    assert _errors(bare) == [("replication", "ALTER ROLE cdc REPLICATION;")]
    assert _errors(replace(bare, managed_available=("rds_replication",))) == [
        ("replication", "GRANT rds_replication TO cdc;")]
    assert _errors(replace(bare, managed_roles=("rds_replication",))) == []
    assert _errors(replace(bare, managed_roles=("azure_pg_admin",))) == []
    assert _errors(replace(bare, superuser=True)) == []


def test_publication_rights() -> None:
    assert _errors(replace(GOOD, create_on_database=False)) == [
        ("create_publication", "GRANT CREATE ON DATABASE shop TO cdc;")]
    foreign = replace(GOOD, tables=(TableIdentity("public.Orders", "table", "default", True, True, False),))
    assert _errors(foreign) == [("create_publication", 'ALTER TABLE public."Orders" OWNER TO cdc;')]
    everything = Request(name="shop", all_tables=True)
    assert _one(GOOD, "create_publication", everything).level == "error"
    assert _one(replace(GOOD, managed_roles=("rds_superuser",)), "create_publication",
                everything).level == "warning"
    assert _errors(replace(GOOD, superuser=True), everything) == []


def test_version_limits_follow_the_options() -> None:
    pg14 = replace(GOOD, server_version=140010)
    assert _errors(pg14, replace(ASK, two_phase=True))[0][0] == "server_version"
    assert "row filters and column lists no (15+)" in _one(pg14, "server_version").message
    assert _errors(GOOD, replace(ASK, failover=True))[0][0] == "server_version"
    assert _errors(replace(GOOD, server_version=170002), replace(ASK, failover=True)) == []
    assert _one(replace(GOOD, server_version=130000), "server_version").level == "error"


def test_headroom_of_slots_and_wal_senders() -> None:
    full = replace(GOOD, max_replication_slots=4, slots_used=4, max_wal_senders=3, walsenders_used=3)
    assert _errors(full) == [
        ("replication_slots", ("ALTER SYSTEM SET max_replication_slots = 8; then restart "
                               "PostgreSQL (or drop an unused slot)")),
        ("wal_senders", "ALTER SYSTEM SET max_wal_senders = 7; then restart PostgreSQL")]
    assert _errors(replace(full, slots_used=3, walsenders_used=2)) == []


def test_settings_that_can_invalidate_or_bloat_a_paused_feeds_slot() -> None:
    unbounded = _one(replace(GOOD, max_slot_wal_keep_mb=-1), "max_slot_wal_keep_size")
    assert unbounded.level == "warning" and "without bound" in unbounded.message
    bounded = _one(GOOD, "max_slot_wal_keep_size")
    assert bounded.level == "warning" and "10240MB" in bounded.message and "invalidated" in bounded.message
    assert [f.check for f in judge(GOOD, ASK) if f.check == "idle_replication_slot_timeout"] == []
    pg18 = replace(GOOD, server_version=180001, idle_slot_timeout_s=3600)
    idle = _one(pg18, "idle_replication_slot_timeout")
    assert idle.level == "warning" and "3600s" in idle.message and idle.fix is not None
    assert _one(replace(pg18, idle_slot_timeout_s=0), "idle_replication_slot_timeout").level == "ok"


def test_replica_identity_refused_or_consented() -> None:
    keyless = TableIdentity("public.nopk", "table", "default", False, False, True)
    nothing = TableIdentity("public.quiet", "table", "nothing", True, False, True)
    facts = replace(GOOD, tables=(*GOOD.tables, keyless, nothing))
    errors = [f for f in judge(facts, ASK) if f.level == "error"]
    assert [(f.check, f.fix.split(";")[0] if f.fix else None) for f in errors] == [
        ("replica_identity", "ALTER TABLE public.nopk REPLICA IDENTITY FULL"),
        ("replica_identity", "ALTER TABLE public.quiet REPLICA IDENTITY FULL")]
    assert "no primary key" in errors[0].message and "REPLICA IDENTITY NOTHING" in errors[1].message
    consent = replace(ASK, keyless="identity_full")
    assert _errors(facts, consent) == []
    foreign = replace(facts, tables=(replace(keyless, owned=False),))
    assert [c for c, _ in _errors(foreign, consent)] == ["create_publication", "replica_identity"]


def test_names_taken_are_errors_adopted_ones_must_exist() -> None:
    taken = replace(GOOD, slot_exists=True, publication_exists=True)
    assert [c for c, _ in _errors(taken)] == ["slot", "publication"]
    assert "will not take over" in _one(taken, "slot").message
    adopt = Request(name="shop", publication="mine", slot="s")
    assert [c for c, _ in _errors(GOOD, adopt)] == ["publication", "slot"]
    ready = replace(GOOD, publication_exists=True, slot_exists=True, slot_plugin="pgoutput",
                    slot_database="shop")
    assert _errors(ready, adopt) == []
    assert _errors(replace(ready, slot_plugin="wal2json"), adopt)[0][0] == "slot"


def test_render_shows_fixes_and_a_count() -> None:
    text = render(judge(replace(GOOD, wal_level="replica"), ASK))
    assert "ERROR  wal_level" in text and "fix: ALTER SYSTEM SET wal_level = logical" in text
    assert text.endswith("1 error(s), 1 warning(s)")


# -- issue 27.5: row filters, column lists, publish_generated_columns -----------------------------

ORDERS_KEYED = LeafIdentity("public.orders", "default", ("id",), True)
FILTERED = Request(name="shop", tables=("public.orders",),
                   filters=(PublishedTable("public.orders", "region = 'eu'", ("id", "region")),))


def test_row_filters_and_column_lists_refused_before_15() -> None:
    old = replace(GOOD, server_version=140011)
    assert _errors(old, FILTERED) == [
        ("row_filter", "leave 'where' and 'columns' out, or upgrade the source")]
    assert "need PostgreSQL 15 or later; the source runs PostgreSQL 14.11" in _one(
        old, "row_filter", FILTERED).message


def test_publish_generated_columns_refused_before_18() -> None:
    asked = replace(ASK, generated_columns=True)
    found = _one(GOOD, "server_version", asked)
    assert found.level == "error"
    assert found.message == ("publish_generated_columns needs PostgreSQL 18 or later; the source "
                             "runs PostgreSQL 15.4")
    assert _errors(replace(GOOD, server_version=180001), asked) == []


def test_a_filter_outside_the_replica_identity_would_break_updates() -> None:
    facts = replace(GOOD, filters=(FilterFacts("public.orders", None, ("region",), (ORDERS_KEYED,)),))
    found = _one(facts, "row_filter", FILTERED)
    assert found.level == "error"
    assert "reads region, outside its replica identity (id)" in found.message
    assert found.fix == ("ALTER TABLE public.orders REPLICA IDENTITY FULL; or filter on replica "
                         "identity columns only")
    # REPLICA IDENTITY FULL covers every column the filter may read
    full = LeafIdentity("public.orders", "full", ("id", "region", "total"), True)
    facts = replace(GOOD, filters=(FilterFacts("public.orders", None, ("region",), (full,)),))
    assert [f for f in judge(facts, replace(FILTERED, filters=(PublishedTable("public.orders", "region = 'eu'"),)))
            if f.level == "error"] == []


def test_a_column_list_must_cover_the_replica_identity() -> None:
    asked = replace(ASK, filters=(PublishedTable("public.orders", None, ("region", "total")),))
    facts = replace(GOOD, filters=(FilterFacts("public.orders", None, (), (ORDERS_KEYED,)),))
    found = _one(facts, "column_list", asked)
    assert found.level == "error" and "leaves out id of its replica identity" in found.message
    assert found.fix == "add id to the column list"
    # PostgreSQL refuses UPDATE/DELETE of a REPLICA IDENTITY FULL table under any column list
    full = LeafIdentity("public.orders", "full", ("id", "region", "total"), True)
    every = replace(ASK, filters=(PublishedTable("public.orders", None, ("id", "region", "total")),))
    facts = replace(GOOD, filters=(FilterFacts("public.orders", None, (), (full,)),))
    assert "REPLICA IDENTITY FULL, which no column list covers" in _one(facts, "column_list", every).message
    # a key-less table that option keyless identity_full makes FULL is judged as FULL
    keyless = LeafIdentity("public.orders", "default", (), False)
    facts = replace(GOOD, filters=(FilterFacts("public.orders", None, (), (keyless,)),))
    assert _one(facts, "column_list", replace(every, keyless="identity_full")).level == "error"


def test_postgresqls_refusal_of_a_filter_names_the_table() -> None:
    facts = replace(GOOD, filters=(FilterFacts("public.orders", 'column "regon" does not exist'),))
    found = _one(facts, "row_filter", FILTERED)
    assert found.message == ('public.orders: PostgreSQL refused its row filter and column list: '
                             'column "regon" does not exist')


def test_row_filter_sql_is_one_expression() -> None:
    for bad in ("true) , public.other WHERE (true", "true; DROP TABLE x", "a = 1 -- c", "(a = 1",
                "a = '1", "  ", "$$x$$ = a"):
        with pytest.raises(ValueError):
            row_filter_sql(bad)
    row_filter_sql("region = 'e)u' AND (\"we;ird\" > 2)")
