"""The supervisor with no PostgreSQL: what it refuses before it touches a source, what it keeps
when a source cannot be reached (and that no password leaks into the error), and its lifecycle
over feeds that capture nothing (pause, resume, delete, readers and tails, status)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pgfeed.errors import FeedExists, FeedNotFound, SourceError
from pgfeed.feeds.catalogue import Catalogue
from pgfeed.feeds.model import FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from tests.fixtures.fix_http import OFFLINE_DSN
from tests.unit.changelog.txns import RELID, txn

SECRET = "s3cr3t-pw"  # OFFLINE_DSN's password


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    catalogue = Catalogue(tmp_path / "catalogue.json")
    catalogue.put(FeedSpec(name="shop", dsn=OFFLINE_DSN, tables=("public.orders",)))
    catalogue.put(FeedSpec(name="every", dsn=OFFLINE_DSN, all_tables=True))
    catalogue.put(FeedSpec(name="adopted", dsn=OFFLINE_DSN, publication="theirs",
                           owns_publication=False))
    sup = Supervisor(tmp_path, changelog_kind="memory", capture=False)
    sup.start()
    yield sup
    sup.stop()


@pytest.mark.parametrize(("spec", "text"), [
    (FeedSpec(name="Bad-Name", dsn=OFFLINE_DSN, tables=("t",)), "invalid feed name"),
    (FeedSpec(name="x" * 49, dsn=OFFLINE_DSN, tables=("t",)), "at most 48"),
    (FeedSpec(name="empty", dsn=OFFLINE_DSN), "needs 'tables'"),
    (FeedSpec(name="both", dsn=OFFLINE_DSN, tables=("t",), publication="p"), "adopted as it is"),
], ids=["name", "long-name", "no-tables", "adopted-with-tables"])
def test_create_refuses_a_bad_spec_before_touching_the_source(
        supervisor: Supervisor, spec: FeedSpec, text: str) -> None:
    with pytest.raises(ValueError, match=text):
        supervisor.create(spec)
    assert supervisor.names() == ["adopted", "every", "shop"]


def test_create_twice_is_feed_exists(supervisor: Supervisor) -> None:
    with pytest.raises(FeedExists):
        supervisor.create(FeedSpec(name="shop", dsn=OFFLINE_DSN, tables=("public.x",)))


def test_an_unreachable_source_creates_nothing_and_shows_no_password(
        supervisor: Supervisor, tmp_path: Path) -> None:
    with pytest.raises(SourceError) as caught:
        supervisor.create(FeedSpec(name="fresh", dsn=OFFLINE_DSN, tables=("public.orders",)))
    assert "checking the source failed" in str(caught.value) and SECRET not in str(caught.value)
    assert "fresh" not in supervisor.names()
    assert "fresh" not in (tmp_path / "catalogue.json").read_text()


def test_delete_keeps_the_feed_when_the_source_cannot_drop_its_slot(supervisor: Supervisor) -> None:
    with pytest.raises(SourceError) as caught:
        supervisor.delete("shop")
    message = str(caught.value)
    assert "was not deleted" in message and "pgfeed_shop" in message and SECRET not in message
    assert "shop" in supervisor.names()
    supervisor.delete("shop", force=True)  # the operator drops slot and publication by hand
    assert "shop" not in supervisor.names()
    with pytest.raises(FeedNotFound):
        supervisor.status("shop")


def test_table_lists_only_for_publications_pgfeed_owns(supervisor: Supervisor) -> None:
    with pytest.raises(ValueError, match="captures all tables"):
        supervisor.set_tables("every", ["public.a"])
    with pytest.raises(ValueError, match="adopted publication 'theirs'"):
        supervisor.set_tables("adopted", ["public.a"])
    with pytest.raises(ValueError, match="at least one table"):
        supervisor.set_tables("shop", [])
    with pytest.raises(SourceError, match="source refused the table list") as caught:
        supervisor.set_tables("shop", ["public.a"])
    assert SECRET not in str(caught.value)
    assert supervisor.spec("shop").tables == ("public.orders",)  # unchanged


def test_pause_and_resume_are_kept_in_the_catalogue(supervisor: Supervisor, tmp_path: Path) -> None:
    status = supervisor.pause("shop")
    assert status.state == "paused"
    again = Supervisor(tmp_path, changelog_kind="memory", capture=False)
    again.start()
    try:
        assert dict(again.feed_flags())["shop"] is True
    finally:
        again.stop()
    supervisor.resume("shop")
    assert dict(supervisor.feed_flags())["shop"] is False


def test_status_without_and_with_the_source(supervisor: Supervisor) -> None:
    supervisor.changelog("shop").append([txn(0x1000, 2, schema=True, ts=1)])
    quick = supervisor.status("shop", probe_source=False)
    assert quick.head_lsn == 0x1000 and quick.slot == "pgfeed_shop" and quick.last_error is None
    assert SECRET not in quick.source and "***" in quick.source
    probed = supervisor.status("shop")
    assert probed.last_error is not None and probed.last_error.startswith("source unreachable")
    assert SECRET not in probed.last_error and probed.server_lsn is None
    assert [s.name for s in supervisor.statuses()] == ["adopted", "every", "shop"]


def test_one_reader_and_one_tail_a_feed_and_the_catalogue_follows_the_log(
        supervisor: Supervisor) -> None:
    reader = supervisor.reader("shop")
    assert supervisor.reader("shop") is reader and supervisor.tail("shop") is supervisor.tail("shop")
    supervisor.check_reader("shop", reader)
    assert supervisor.catalog("shop").versions(RELID) == []
    supervisor.changelog("shop").append([txn(0x1000, 1, schema=True, ts=1)])
    (schema,) = supervisor.catalog("shop").versions(RELID)
    assert schema.qualified_name == "public.orders" and schema.column_names == ("id", "customer", "note")
    assert supervisor.catalog("shop") is supervisor.catalog("shop")
    supervisor.delete("shop", force=True)
    with pytest.raises(FeedNotFound):
        supervisor.check_reader("shop", reader)


def test_an_embedded_store_has_one_replica_and_no_leaders(supervisor: Supervisor) -> None:
    assert supervisor.leaders() == {} and supervisor.leadership is None
    (replica,) = supervisor.replicas()
    assert replica.id == supervisor.replica_id and replica.alive and replica.leads == []


def test_a_supervisor_needs_a_data_dir_or_a_store() -> None:
    with pytest.raises(ValueError, match="data dir or a store"):
        Supervisor()
