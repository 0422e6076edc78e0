"""One feed's backfills: validation, planning, worker threads, states and progress as served.

A backfill's record and per-part progress live in the feed's change log (progress written with
each chunk), so after a restart, a pause or a crash the manager starts workers again for every
backfill still ``running`` and each part goes on from its next chunk.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import psycopg

from pgfeed.assembler.model import BackfillProgress
from pgfeed.backfill import source
from pgfeed.backfill.window import Chunk, WindowTracker
from pgfeed.changelog.backfills import (
    MAX_CHUNK_ROWS,
    MAX_PARALLEL,
    BackfillPart,
    BackfillRecord,
    TableStatus,
    derive_state,
)
from pgfeed.changelog.base import ChangeLog
from pgfeed.dsn import scrub
from pgfeed.errors import BackfillError, PgfeedError

log = logging.getLogger("pgfeed.backfill")

SYNC_TIMEOUT = 30.0  # seconds a worker waits for capture to start remembering its table
PROGRESS_LOG_SECONDS = 10.0  # at most one progress line a backfill this often
CHUNK_TIMEOUT = 120.0  # seconds a worker waits for capture to judge a chunk before retrying it
MAX_REDOS = 200  # chunks judged "redo" in a row before the backfill fails with the reason
RETRIES = 5  # source errors in a row before the backfill fails
BACKOFF = (0.2, 0.5, 1.0, 2.0, 5.0)
PIPELINE = 2  # chunks a worker has read and capture has not judged yet (memory: this many chunks)


def stored_start(stored: BackfillProgress, part: BackfillPart) -> list[str] | None:
    """Where the chunk after ``stored`` starts (exclusive)."""
    text = stored.last_key if stored.last_key is not None else part.lower
    return None if text is None else json.loads(text)


@dataclass
class _Run:
    """A running backfill's threads and live counters (this process only)."""

    record: BackfillRecord
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: deque[BackfillPart] = field(default_factory=deque)
    rows: int = 0
    chunks: int = 0
    redos: int = 0
    samples: deque[tuple[float, int]] = field(default_factory=deque)
    error: str | None = None
    active: int = 0  # workers still running
    # per table: set when the table stops alone (failed, cancelled) or the whole run stops
    table_stops: dict[str, threading.Event] = field(default_factory=dict)
    working: dict[int, str] = field(default_factory=dict)  # part being read -> its table
    spawned: int = 0  # worker threads started (names)
    logged_at: float = 0.0  # last progress line in the log (monotonic)

    def count(self, rows: int) -> bool:
        """Count a stored chunk; True when a progress line is due (every PROGRESS_LOG_SECONDS)."""
        with self.lock:
            self.rows += rows
            self.chunks += 1
            now = time.monotonic()
            self.samples.append((now, self.rows))
            while len(self.samples) > 2 and now - self.samples[0][0] > 10:
                self.samples.popleft()
            due = now - self.logged_at >= PROGRESS_LOG_SECONDS
            if due:
                self.logged_at = now
            return due

    def rate(self) -> float:
        """Rows per second over the last ~10 s."""
        with self.lock:
            if len(self.samples) < 2 or time.monotonic() - self.samples[-1][0] > 10:
                return 0.0
            (t0, r0), (t1, r1) = self.samples[0], self.samples[-1]
            return (r1 - r0) / (t1 - t0) if t1 > t0 else 0.0


@dataclass(frozen=True, slots=True)
class BackfillSource:
    """What a backfill needs to know of its feed (read afresh for each backfill and part: the
    feed's tables may change meanwhile)."""

    feed: str
    dsn: str
    publication: str


class BackfillManager:
    """The backfills of one feed. ``start_workers``/``stop_workers`` follow the feed's capture:
    workers only run while capture does (a chunk is judged when capture's stream passes it)."""

    def __init__(self, feed: Callable[[], BackfillSource], changelog: ChangeLog,
                 tracker: WindowTracker) -> None:
        self._feed = feed
        self._changelog = changelog
        self.tracker = tracker
        # rows and chunks stored (and chunks redone) by this process's workers: metrics
        self.rows_stored = self.chunks_stored = self.chunks_redone = 0
        self._lock = threading.RLock()
        self._runs: dict[str, _Run] = {}
        self._running = False
        # per table: the plan of its last chunk and that plan's catalog digest (source.read_chunk)
        self._plans: dict[str, source.TablePlan] = {}
        self._fingerprints: dict[str, str | None] = {}

    # -- the API's verbs ----------------------------------------------------------------------------
    def start(self, tables: Sequence[str], *, chunk_rows: int, parallel: int,
              initial: bool = False, skip_refused: bool = False) -> BackfillRecord:
        """Validate, plan and start a backfill; BackfillError (nothing started) when refused.

        ``skip_refused`` (the initial snapshot): a table that cannot be backfilled (no key, ...)
        does not refuse the others; it is recorded ``failed`` with the reason from the start."""
        spec = self._feed()
        if not tables:
            raise BackfillError("a backfill needs at least one table in 'tables'")
        if not 1 <= chunk_rows <= MAX_CHUNK_ROWS:
            raise BackfillError(f"chunk_rows must be between 1 and {MAX_CHUNK_ROWS}, got {chunk_rows}")
        if not 1 <= parallel <= MAX_PARALLEL:
            raise BackfillError(f"parallel must be between 1 and {MAX_PARALLEL}, got {parallel}")
        names = [source.split_name(t) for t in tables]
        if len(set(names)) != len(names):
            raise BackfillError("'tables' names a table twice")
        try:
            with source.connect(spec.dsn) as conn:
                plans: list[source.TablePlan] = []
                refused: list[TableStatus] = []
                for t in tables:
                    try:
                        plans.append(source.describe(conn, spec.publication, t))
                    except BackfillError as exc:
                        if not skip_refused:
                            raise
                        schema, name = source.split_name(t)
                        refused.append(TableStatus(f"{schema}.{name}", "failed", str(exc),
                                                   time.time()))
                with self._lock:
                    busy = self._busy_tables()
                    for plan in plans:
                        if plan.qualified in busy:
                            raise BackfillError(
                                f"table {plan.qualified} is being backfilled by {busy[plan.qualified]}: "
                                "wait for it or cancel it", status=409, code="backfill_running")
                    parts: list[BackfillPart] = []
                    for plan in plans:
                        ranges = source.split(conn, plan, parallel, chunk_rows)
                        for lower, upper in ranges:
                            parts.append(BackfillPart(len(parts), plan.qualified, lower, upper,
                                                      plan.reltuples // len(ranges)))
                    record = BackfillRecord(
                        f"bf_{secrets.token_hex(6)}",
                        tuple(p.qualified for p in plans) + tuple(r.table for r in refused),
                        chunk_rows, parallel, created_at=time.time(), initial=initial,
                        parts=tuple(parts), ended=tuple(refused))
                    if not plans:
                        record = self._final(record)
                    self._changelog.save_backfill(record)
                    if plans:
                        self._runs[record.id] = _Run(record)
                        if self._running:
                            self._launch(self._runs[record.id])
        except psycopg.Error as exc:
            raise BackfillError(f"the source refused the backfill's checks: "
                                f"{scrub(str(exc).strip(), spec.dsn)}", status=422,
                                code="source_error") from None
        log.info("feed %s: backfill %s of %s started", spec.feed, record.id, ", ".join(record.tables))
        for r in refused:
            log.warning("feed %s: backfill %s cannot read %s: %s", spec.feed, record.id, r.table, r.error)
        return record

    def records(self) -> list[BackfillRecord]:
        return self._changelog.backfills()

    def get(self, backfill_id: str) -> BackfillRecord:
        for record in self._changelog.backfills():
            if record.id == backfill_id:
                return record
        raise BackfillError(f"backfill {backfill_id!r} does not exist", status=404,
                            code="backfill_not_found")

    def cancel(self, backfill_id: str) -> BackfillRecord:
        record = self.get(backfill_id)
        if record.state != "running":
            return record
        with self._lock:
            run = self._runs.pop(backfill_id, None)
        if run is not None:
            self._halt(run)
        with self._lock:
            record = self.get(backfill_id)
            now = time.time()
            for table, state in record.table_states().items():  # each table ends on its own
                if state == "running":
                    record = record.with_table(TableStatus(table, "cancelled", None, now), table)
            record = record.with_state("cancelled", finished_at=now)
            self._changelog.save_backfill(record)
        log.info("backfill %s cancelled", backfill_id)
        return record

    def table_of(self, record: BackfillRecord, table: str) -> str:
        """``table`` as the record names it (``name`` alone means ``public.name``); 404 else."""
        schema, name = source.split_name(table)
        qualified = f"{schema}.{name}"
        if qualified not in record.tables:
            raise BackfillError(f"backfill {record.id} does not read table {qualified}", status=404,
                                code="table_not_in_backfill")
        return qualified

    def cancel_table(self, backfill_id: str, table: str) -> BackfillRecord:
        """Stop reading one table (what was stored stays); the other tables go on. A table
        that already ended (done, failed, cancelled) is left as it is."""
        with self._lock:
            record = self.get(backfill_id)
            table = self.table_of(record, table)
            if record.state != "running" or record.table_state(table) != "running":
                return record
            record = record.with_table(TableStatus(table, "cancelled", None, time.time()), table)
            self._changelog.save_backfill(record)
            run = self._runs.get(backfill_id)
        log.info("backfill %s: table %s cancelled", backfill_id, table)
        if run is not None:
            self._stop_table(run, table, wait=True)
        return self._settle(backfill_id)

    def retry_table(self, backfill_id: str, table: str) -> BackfillRecord:
        """Read a failed or cancelled table again from its last stored key (planned now when it
        was refused before any part was); the backfill runs again until its tables end.
        BackfillError (nothing changed) when the table still cannot be backfilled."""
        spec = self._feed()
        record = self.get(backfill_id)
        table = self.table_of(record, table)
        state = record.table_state(table)
        if state in ("running", "done"):
            raise BackfillError(f"table {table} of backfill {backfill_id} is {state}: only a failed "
                                "or cancelled table can be retried", status=409,
                                code="backfill_table_not_retryable")
        try:
            with source.connect(spec.dsn) as conn:
                plan = source.describe(conn, spec.publication, table)  # refused now: say why
                with self._lock:
                    busy = self._busy_tables()
                    if busy.get(table, backfill_id) != backfill_id:
                        raise BackfillError(f"table {table} is being backfilled by {busy[table]}: "
                                            "wait for it or cancel it", status=409,
                                            code="backfill_running")
                    record = self.get(backfill_id)
                    if record.table_state(table) not in ("failed", "cancelled"):
                        return record  # retried meanwhile
                    parts = [p for p in record.parts if p.table == table]
                    if not parts:
                        first = max((p.part for p in record.parts), default=-1) + 1
                        ranges = source.split(conn, plan, record.parallel, record.chunk_rows)
                        parts = [BackfillPart(first + i, table, lower, upper,
                                              plan.reltuples // len(ranges))
                                 for i, (lower, upper) in enumerate(ranges)]
                        record = replace(record, parts=record.parts + tuple(parts))
                    # every other table keeps the state it has now, then this one runs again
                    now = time.time()
                    for other, other_state in record.table_states().items():
                        if other_state in ("failed", "cancelled") and record.ended_table(other) is None:
                            record = record.with_table(TableStatus(other, other_state, record.error, now),
                                                       other)
                    record = replace(record.with_table(None, table), state="running", error=None,
                                     finished_at=None)
                    self._changelog.save_backfill(record)
                    run = self._runs.get(backfill_id)
                    if run is not None and any(t.is_alive() for t in run.threads):
                        self._add_parts(run, [p for p in parts if not p.done], table)
                    else:
                        run = self._runs[backfill_id] = _Run(record)
                        if self._running:
                            self._launch(run)
        except psycopg.Error as exc:
            raise BackfillError(f"the source refused the backfill's checks: "
                                f"{scrub(str(exc).strip(), spec.dsn)}", status=422,
                                code="source_error") from None
        log.info("backfill %s: table %s retried", backfill_id, table)
        return record

    def live(self, backfill_id: str) -> tuple[float, int, str | None]:
        """This process's view of a running backfill: rate (rows/s), redone chunks, last problem."""
        with self._lock:
            run = self._runs.get(backfill_id)
        if run is None:
            return 0.0, 0, None
        return run.rate(), run.redos, run.error

    def running_count(self) -> int:
        with self._lock:
            return len(self._runs)

    def initial_running(self) -> bool:
        with self._lock:
            return any(r.record.initial for r in self._runs.values())

    # -- following capture --------------------------------------------------------------------------
    def start_workers(self) -> None:
        """Capture runs: start workers for every backfill the log says is running."""
        with self._lock:
            self._running = True
            self._launch_stored(self._changelog.backfills())

    def _launch_stored(self, records: Sequence[BackfillRecord]) -> None:
        """Under the lock: workers for every running record that has none alive here."""
        for record in records:
            if record.state != "running":
                continue
            run = self._runs.get(record.id)
            if run is None or not any(t.is_alive() for t in run.threads):
                run = self._runs[record.id] = _Run(record)
                self._launch(run)

    def refresh(self) -> None:
        """The store says this feed's backfills changed (a replica that does not capture it
        started or cancelled one): while capture runs here, workers start for the new ones and
        stop for those no longer running, without a capture restart."""
        with self._lock:
            if not self._running:
                return
            records = self._changelog.backfills()
            states = {r.id: r.state for r in records}
            ended = [self._runs.pop(i) for i in list(self._runs)
                     if states.get(i, "running") != "running"]
            self._launch_stored(records)
            # tables cancelled (or retried) alone on another replica
            by_id = {r.id: r for r in records}
            for run in self._runs.values():
                stored = by_id.get(run.record.id)
                if stored is None:
                    continue
                for table, state in stored.table_states().items():
                    stop = run.table_stops.get(table)
                    if state in ("failed", "cancelled") and stop is not None:
                        stop.set()
                    elif state == "running" and (stop is None or stop.is_set()) and run.threads:
                        self._add_parts(run, [p for p in stored.parts
                                              if p.table == table and not p.done], table)
        for run in ended:
            self._halt(run)

    def stop_workers(self) -> None:
        """Capture stops (pause, delete, shutdown): workers stop; records stay ``running``."""
        with self._lock:
            self._running = False
            runs = list(self._runs.values())
        for run in runs:
            self._halt(run)

    def _busy_tables(self) -> dict[str, str]:
        busy = {}
        for record in self._changelog.backfills():
            if record.state == "running":
                for part in record.parts:
                    if not part.done and record.table_state(part.table) == "running":
                        busy[part.table] = record.id
        return busy

    def _halt(self, run: _Run) -> None:
        run.stop.set()
        with run.lock:
            for stop in run.table_stops.values():
                stop.set()
        self.tracker.cancel(backfill_id=run.record.id)
        for thread in run.threads:
            if thread is not threading.current_thread():
                thread.join(timeout=30)

    def _launch(self, run: _Run) -> None:
        record = run.record
        run.pending = deque(p for p in record.parts
                            if not p.done and record.table_state(p.table) == "running")
        run.table_stops = {t: threading.Event() for t in record.tables}
        for table, state in record.table_states().items():
            if state != "running":
                run.table_stops[table].set()
        workers = max(1, min(record.parallel, len(run.pending)))
        run.active = workers
        run.threads = [self._thread(run) for _ in range(workers)]
        for thread in run.threads:
            thread.start()

    def _thread(self, run: _Run) -> threading.Thread:
        run.spawned += 1
        return threading.Thread(target=self._work, args=(run,), daemon=True,
                                name=f"pgfeed-backfill-{run.record.id}-{run.spawned - 1}")

    def _add_parts(self, run: _Run, parts: Sequence[BackfillPart], table: str) -> None:
        """A retried table's parts join a run whose workers are alive; workers are added up to
        ``parallel``."""
        with run.lock:
            run.table_stops[table] = threading.Event()
            run.pending.extend(parts)
            more = min(run.record.parallel, run.active + len(run.pending)) - run.active
            threads = [self._thread(run) for _ in range(max(0, more))]
            run.active += len(threads)
            run.threads = [t for t in run.threads if t.is_alive()] + threads
        for thread in threads:
            thread.start()

    def _stop_table(self, run: _Run, table: str, *, wait: bool) -> None:
        """Stop ``table``'s parts in ``run`` (its chunks in flight are dropped by the workers
        reading them); with ``wait``, until no worker reads it (at most 30 s)."""
        with run.lock:
            stop = run.table_stops.setdefault(table, threading.Event())
        stop.set()
        deadline = time.monotonic() + 30
        while wait and time.monotonic() < deadline:
            with run.lock:
                if table not in run.working.values():
                    return
            time.sleep(0.02)

    # -- workers --------------------------------------------------------------------------------------
    def _work(self, run: _Run) -> None:
        while True:
            with run.lock:
                part = None
                while run.pending and not run.stop.is_set():
                    candidate = run.pending.popleft()
                    stop = run.table_stops.get(candidate.table)
                    if stop is None or not stop.is_set():
                        part = candidate
                        break
                if part is None:  # leave under the lock: a retry adds workers if it sees none
                    run.active -= 1
                    last = run.active == 0
                    break
                run.working[part.part] = part.table
            try:
                self._part(run, part)
            except PgfeedError as exc:  # this table fails; the others go on
                self._fail_table(run, part.table, f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # a bug: fail the table, keep the service up
                log.exception("backfill %s failed unexpectedly on %s", run.record.id, part.table)
                self._fail_table(run, part.table, f"{type(exc).__name__}: {exc}")
            finally:
                with run.lock:
                    run.working.pop(part.part, None)
        if last and not run.stop.is_set():
            self._finish(run)

    def _part(self, run: _Run, part: BackfillPart) -> None:
        spec = self._feed()
        stop = run.table_stops[part.table]
        failures = 0
        # The part's progress as far as capture stored it (durable soon, or the log's own after
        # a crash): a retry after a source error goes on from here.
        state = [BackfillProgress(run.record.id, part.part, part.last_key, part.rows, part.chunks,
                                  part.done)]
        while not stop.is_set():
            try:
                with source.connect(spec.dsn) as conn:
                    self._read_part(run, part, conn, spec, state, stop)
                return
            except psycopg.errors.UndefinedTable:  # dropped: no retry brings it back
                raise BackfillError(f"table {part.table} no longer exists on the source") from None
            except psycopg.Error as exc:
                failures += 1
                run.error = scrub(str(exc).strip(), spec.dsn)
                if failures > RETRIES:
                    raise BackfillError(f"source failed {failures} times in a row: {run.error}") from None
                log.warning("backfill %s part %d: %s; retrying", run.record.id, part.part, run.error)
                stop.wait(BACKOFF[min(failures, len(BACKOFF)) - 1])
                p = state[0]
                part = replace(part, last_key=p.last_key, rows=p.rows, chunks=p.chunks, done=p.done)

    def _read_part(self, run: _Run, part: BackfillPart, conn: psycopg.Connection,
                   spec: BackfillSource, state: list[BackfillProgress],
                   stop: threading.Event) -> None:
        plan = source.describe(conn, spec.publication, part.table, estimate=False)
        tracker = self.tracker
        generation = tracker.watch(plan.oid, plan.key, plan.key_index)
        # Chunks read and not yet judged, oldest first: the next one is read while capture
        # judges the previous (a chunk is stored only if the one before it was).
        pending: deque[tuple[Chunk, bool]] = deque()
        try:
            deadline = time.monotonic() + SYNC_TIMEOUT
            while tracker.synced < generation:
                if stop.wait(0.02) or time.monotonic() > deadline:
                    if stop.is_set():
                        return
                    raise psycopg.OperationalError("capture did not start following the table in time")
            # (a standby lists no running transaction in its snapshots: nothing to suspect, and
            # its chunks are judged by what was running before each, ``source.running``)
            standby = source.in_recovery(conn)
            _, committed = source.in_progress(conn)
            tracker.suspect(committed)
            upper = json.loads(part.upper) if part.upper else None
            stored = state[0]  # what the log holds for the part; then each stored chunk's result
            after = part.start_key()
            exhausted, redos = False, 0
            while not stop.is_set():
                if not exhausted and len(pending) < PIPELINE:
                    tracker.pace(stop)  # live commits slow to become durable: hold back
                    if stop.is_set():
                        break
                    pred = pending[-1][0] if pending else None
                    chunk, last, exhausted = self._chunk(run, part, conn, spec, plan, after, upper,
                                                         pred, stored, standby)
                    pending.append((chunk, exhausted))
                    after = last
                    continue
                if not pending:
                    return
                chunk, was_last = pending[0]
                waited = time.monotonic() + CHUNK_TIMEOUT
                while not chunk.done.wait(0.1) and not stop.is_set() and time.monotonic() < waited:
                    pass
                if stop.is_set() and not chunk.done.is_set():
                    return  # the table stopped alone: its chunks in flight are cancelled below
                if not chunk.done.is_set():
                    for c, _ in pending:
                        tracker.cancel(token=c.token)
                    if stop.is_set():
                        return
                    raise psycopg.OperationalError("capture's stream did not pass a chunk's "
                                                   f"snapshot within {CHUNK_TIMEOUT:.0f} s")
                pending.popleft()
                if chunk.outcome == "cancelled":
                    return
                if chunk.outcome == "redo":
                    for c, _ in pending:  # read after it: redone with it
                        tracker.cancel(token=c.token)
                    pending.clear()
                    if chunk.result is not None:  # pieces of it were stored: go on after them
                        stored = state[0] = chunk.result
                        self._count(run, chunk.stored_rows)
                    redos += 1
                    run.redos += 1
                    self.chunks_redone += 1
                    run.error = f"chunk redone: {chunk.problem}"
                    if redos > MAX_REDOS:
                        raise BackfillError(f"part {part.part} of {part.table}: {redos} chunks in a "
                                            f"row had to be redone; last: {chunk.problem}")
                    after, exhausted = stored_start(stored, part), False
                    stop.wait(min(0.05 * redos, 2.0))
                    continue
                redos = 0
                assert chunk.result is not None
                stored = state[0] = chunk.result
                self._count(run, chunk.stored_rows)
                if was_last:
                    return
        finally:
            # Leaving early (an error, a stop): chunks not judged yet are cancelled, and those
            # capture already stored count, so a retry does not read them again.
            for c, _ in pending:
                tracker.cancel(token=c.token)
                if c.result is not None:  # stored, or pieces of it before a cancel
                    state[0] = c.result
            tracker.unwatch(plan.oid)

    def _chunk(self, run: _Run, part: BackfillPart, conn: psycopg.Connection, spec: BackfillSource,
               plan: source.TablePlan, after: list[str] | None, upper: list[str] | None,
               pred: Chunk | None, stored: BackfillProgress, standby: bool,
               ) -> tuple[Chunk, list[str] | None, bool]:
        """Register and read one chunk (capture judges it once its stream passes the chunk's
        snapshot); returns it, the last key read (``after`` when none) and whether the range
        has no more rows."""
        tracker = self.tracker
        token = f"{run.record.id}.{part.part}.{secrets.token_hex(6)}"
        before = source.running(conn, standby)
        chunk = Chunk(token, run.record.id, part.part, plan.oid, before.floor, pred=pred)
        tracker.register(chunk)
        try:
            read = source.read_chunk(conn, spec.publication, part.table, after, upper,
                                     run.record.chunk_rows, self._plans.get(part.table),
                                     self._fingerprints.get(part.table), before.judge_by)
            self._plans[part.table], self._fingerprints[part.table] = read.plan, read.fingerprint
            last = read.last_key if read.last_key is not None else after
            progress = BackfillProgress(run.record.id, part.part,
                                        None if last is None else json.dumps(last),
                                        stored.rows, stored.chunks, read.exhausted)
            tracker.read(token, read.rows, read.xmax, read.xip, read.lsn, progress,
                         read.plan.messages)
        except BaseException:
            tracker.cancel(token=token)
            raise
        return chunk, last, read.exhausted

    def _count(self, run: _Run, rows: int) -> None:
        if run.count(rows):
            log.info("backfill %s: %d rows in %d chunks, %.0f rows/s", run.record.id,
                     run.rows, run.chunks, run.rate(),
                     extra={"event": "backfill_progress", "backfill": run.record.id,
                            "rows": run.rows, "chunks": run.chunks})
        self.rows_stored += rows
        self.chunks_stored += 1

    def _fail_table(self, run: _Run, table: str, error: str) -> None:
        """One table failed: it stops with its reason; the backfill goes on with the others
        and ends (``failed``) once they have."""
        log.error("backfill %s: table %s failed: %s", run.record.id, table, error)
        with self._lock:  # saved, then stopped, under the lock ``refresh`` reads the store under
            record = self._durable(run.record.id)
            if record is not None and record.state == "running" and \
                    record.table_state(table) == "running":  # else: cancelled meanwhile, that stands
                self._changelog.save_backfill(
                    record.with_table(TableStatus(table, "failed", error, time.time()), table))
            self._stop_table(run, table, wait=False)
        self._settle(run.record.id)

    @staticmethod
    def _final(record: BackfillRecord) -> BackfillRecord:
        """The record as it ends, when every table has (``done``/``failed``/``cancelled``,
        ``derive_state``); the record itself while a table runs."""
        state = derive_state(record.table_states())
        if state == "running":
            return record
        failed = [t for t in record.ended if t.state == "failed"]
        error = None if not failed else (
            f"{len(failed)} of {len(record.tables)} tables failed: "
            + "; ".join(f"{t.table}: {t.error}" for t in failed))
        return record.with_state(state, error, time.time())

    def _settle(self, backfill_id: str) -> BackfillRecord:
        """Record the backfill's end once no table of it runs (parts durable as done)."""
        with self._lock:
            record = self.get(backfill_id)
            if record.state != "running":
                return record
            final = self._final(record)
            if final.state == "running":
                return record
            run = self._runs.pop(backfill_id, None)
            if run is not None:
                with run.lock:
                    for stop in run.table_stops.values():
                        stop.set()
            self._changelog.save_backfill(final)
        log.info("backfill %s %s%s", backfill_id, final.state,
                 f": {final.error}" if final.error else "")
        return final

    def _finish(self, run: _Run) -> None:
        """Every part read: wait until the log holds every running table's parts as done (the
        last chunks are appended by capture's writer), then record the backfill's end. Stopped
        (pause), the record stays running and the next start finds every part done and
        finishes it; a retry that added workers meanwhile leaves it to them."""
        while not run.stop.is_set():
            with run.lock:
                if run.active > 0:
                    return
            record = self._durable(run.record.id)
            if record is None or record.state != "running":
                return
            if "running" not in record.table_states().values():
                self._settle(run.record.id)
                return
            run.stop.wait(0.05)

    def _durable(self, backfill_id: str) -> BackfillRecord | None:
        for record in self._changelog.backfills():
            if record.id == backfill_id:
                return record
        return None
