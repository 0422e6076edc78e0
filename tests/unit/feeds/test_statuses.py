"""Feed statuses probe their sources in parallel: unreachable sources cost one connect timeout
between them (gRPC ListFeeds, /metrics), not one each."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgfeed.feeds.catalogue import Catalogue
from pgfeed.feeds.model import FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.metrics import Metrics
from pgfeed.replication import connect as connect_module


@pytest.fixture
def silent_source() -> Iterator[str]:
    """A DSN whose server accepts the TCP connection and then never answers: each connection
    attempt waits out its connect timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # never accepted: the kernel completes the handshakes
        yield f"host=127.0.0.1 port={listener.getsockname()[1]} dbname=shop user=cdc password=s3cret"


TIMEOUT = 2  # libpq's smallest connect_timeout


def test_unreachable_sources_are_probed_at_once(tmp_path: Path, silent_source: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect_module, "CONNECT_TIMEOUT", TIMEOUT)
    catalogue = Catalogue(tmp_path / "catalogue.json")
    for name in ("a", "b", "c"):
        catalogue.put(FeedSpec(name=name, dsn=silent_source, tables=("public.orders",)))
    supervisor = Supervisor(tmp_path, changelog_kind="memory", capture=False)
    supervisor.start()
    try:
        start = time.monotonic()
        statuses = supervisor.statuses()
        took = time.monotonic() - start
        assert [s.name for s in statuses] == ["a", "b", "c"]
        assert all(s.last_error and s.last_error.startswith("source unreachable") for s in statuses)
        assert all("s3cret" not in (s.last_error or "") + s.source for s in statuses)
        assert took < 2 * TIMEOUT  # one timeout's worth, not three

        start = time.monotonic()
        text = Metrics(supervisor).render().decode()
        assert time.monotonic() - start < 2 * TIMEOUT
        assert all(f'pgfeed_feed_head_lsn{{feed="{n}"}}' in text for n in "abc")
    finally:
        supervisor.stop()
