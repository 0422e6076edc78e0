"""toast=reselect through FeedReader and the durable fill index (``feeds.toastindex``): the value
served at a position is the same for every reader, whatever was read before, after a restart and
after retention trims."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgfeed.changelog.sqlite import SqliteChangeLog
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.runs import loaded
from pgfeed.feeds.reader import FeedReader, ReaderBusy
from pgfeed.feeds.toastindex import ToastIndex
from pgfeed_client._cursor import EARLIEST, Cursor
from tests.unit.decoding.test_changes import U, ins, relation, stored, upd

# (commit_lsn, change): body is v1, v2, v3 in turn; the even ones leave it unchanged.
HISTORY = [(0x2000, ins("1", "new", "v1")), (0x3000, upd("1", "a", U)),
           (0x4000, upd("1", "b", "v2")), (0x5000, upd("1", "c", U)),
           (0x6000, upd("1", "d", "v3")), (0x7000, upd("1", "e", U))]
EXPECTED = {0x3000: "v1", 0x5000: "v2", 0x7000: "v3"}


def _log(path: Path) -> SqliteChangeLog:
    log = SqliteChangeLog(path / "changelog.db")
    if not log.head():
        first, *rest = HISTORY
        log.append([stored(relation(), first[1], commit_lsn=first[0])]
                   + [stored(msg, commit_lsn=lsn) for lsn, msg in rest])
    return log


def _reader(path: Path, log: SqliteChangeLog) -> FeedReader:
    def catalog() -> RelationCatalog:
        cat = RelationCatalog()
        for lsn, frame in log.schema_history():
            cat.add(lsn, frame)
        return cat
    return FeedReader(log, catalog, toast="reselect", toast_index=ToastIndex(path / "toast.db"))


def _bodies(reader: FeedReader, after: Cursor) -> dict[int, object]:
    """commit_lsn -> body served, for the updates that left it unchanged."""
    page = reader.page(after, 100)
    out = {}
    for read in page.transactions:
        txn = loaded(read)
        for change in txn.changes:
            if change.unchanged_toast:
                assert change.unchanged_toast == ["body"]
                out[txn.commit_lsn] = change.after.get("body") if change.toast_filled else None
    return out


def test_readers_at_different_cursors_get_the_same_answer(tmp_path: Path) -> None:
    log = _log(tmp_path)
    reader = _reader(tmp_path, log)
    assert _bodies(reader, EARLIEST) == EXPECTED  # one reader reads it all first
    later = _bodies(reader, Cursor(0x4000))  # then another from a later cursor
    assert later == {0x5000: "v2", 0x7000: "v3"}


def test_a_reader_that_starts_late_after_a_restart_gets_the_same_answer(tmp_path: Path) -> None:
    log = _log(tmp_path)
    assert _bodies(_reader(tmp_path, log), Cursor(0x4000)) == {0x5000: "v2", 0x7000: "v3"}
    log.close()
    log = _log(tmp_path)  # a new process over the same files
    reader = _reader(tmp_path, log)
    assert _bodies(reader, Cursor(0x6000)) == {0x7000: "v3"}
    assert _bodies(reader, EARLIEST) == EXPECTED


def test_a_fresh_index_at_a_late_cursor_reads_the_log_before_it(tmp_path: Path) -> None:
    log = _log(tmp_path)
    assert _bodies(_reader(tmp_path, log), Cursor(0x6000)) == {0x7000: "v3"}
    (tmp_path / "other").mkdir()
    assert _bodies(_reader(tmp_path / "other", log), Cursor(0x4000)) == {0x5000: "v2", 0x7000: "v3"}


def test_retention_keeps_the_answers_once_the_index_has_taken_the_log_in(tmp_path: Path) -> None:
    log = _log(tmp_path)
    reader = _reader(tmp_path, log)
    reader.index_toast()  # what Supervisor.prepare_trim does before retention
    log.trim(0x5000)
    assert _bodies(reader, EARLIEST) == {0x5000: "v2", 0x7000: "v3"}
    log.trim(0x7000)
    log.close()
    log = _log(tmp_path)
    assert _bodies(_reader(tmp_path, log), EARLIEST) == {0x7000: "v3"}


def test_a_gap_the_index_never_saw_leaves_values_unfilled_not_wrong(tmp_path: Path) -> None:
    log = _log(tmp_path)
    reader = _reader(tmp_path, log)
    assert _bodies(reader, EARLIEST) == EXPECTED
    log.append([stored(upd("1", "f", "v4"), commit_lsn=0x8000),
                stored(upd("1", "g", U), commit_lsn=0x9000)])
    log.trim(0x9000)  # 0x8000 goes before the index took it in: v3 is outdated, v4 unknown
    assert _bodies(reader, Cursor(0x7000)) == {0x9000: None}
    assert _bodies(_reader(tmp_path, log), Cursor(0x8000)) == {0x9000: None}


def test_reselect_needs_an_index(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with pytest.raises(ValueError, match="toast index"):
        FeedReader(log, RelationCatalog, toast="reselect")


def test_an_inline_read_does_not_wait_for_the_index(tmp_path: Path) -> None:
    reader = _reader(tmp_path, _log(tmp_path))
    assert reader.toast_index is not None
    with reader.toast_index._lock, pytest.raises(ReaderBusy):  # another thread applying it
        reader.page(EARLIEST, 10, block=False)
    assert _bodies(reader, EARLIEST) == EXPECTED


def test_an_inline_read_does_not_catch_a_lagging_index_up(tmp_path: Path) -> None:
    reader = _reader(tmp_path, _log(tmp_path))
    with pytest.raises(ReaderBusy):  # the index has nothing yet: a worker thread's job
        reader.page(Cursor(0x6000), 10, block=False)
    assert _bodies(reader, Cursor(0x6000)) == {0x7000: "v3"}
    page = reader.page(Cursor(0x6000), 10, block=False)  # now it only applies its own page
    assert [t.commit_lsn for t in page.transactions] == [0x7000]
