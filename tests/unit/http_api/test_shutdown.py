"""SIGTERM does not wait out long-polls: the ordered shutdown answers them at once (issue 19)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from pgfeed.feeds.catalogue import Catalogue
from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from tests.fixtures.fix_http import OFFLINE_DSN
from tests.fixtures.fix_service import run_service


def test_stopping_answers_waiting_long_polls_at_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    Catalogue(data / "catalogue.json").put(
        FeedSpec(name="shop", dsn=OFFLINE_DSN, tables=("public.orders",), options=FeedOptions()))
    supervisor = Supervisor(data, changelog_kind="memory", capture=False)
    answers: list[httpx.Response] = []
    with run_service(data, supervisor) as service:
        url = f"{service.http_url}/v1/feeds/shop/changes?after=latest&wait=60"

        def poll() -> None:
            answers.append(httpx.get(url, timeout=90))

        waiting = threading.Thread(target=poll)
        waiting.start()
        # A second long-poll whose client goes away without reading its answer.
        parts = urlsplit(url)
        gone = socket.create_connection((parts.hostname, parts.port))
        gone.sendall(f"GET {parts.path}?{parts.query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        gone.close()
        time.sleep(0.5)  # both are waiting on the feed's head now
        started = time.monotonic()
        # leaving the block is SIGTERM's path: Runtime.request_stop, then the ordered shutdown
    elapsed = time.monotonic() - started
    waiting.join(10)
    assert elapsed < 5, f"shutdown waited {elapsed:.1f} s for long-polls"
    assert [a.status_code for a in answers] == [200]
    assert answers[0].json()["changes"] == []
