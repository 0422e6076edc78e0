"""Operators' metrics through a live server on real PostgreSQL: answers counted by status code on
both surfaces, build info, per-consumer lag, slot safety and reconnects; and the shipped alert
rules and Grafana dashboard, checked by promtool and against the names /metrics really has."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import grpc
import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import pgfeed
from pgfeed_client import parse_lsn
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc
from tests.fixtures.fix_service import FeedFactory

pytestmark = pytest.mark.pg

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# what a family's samples add to its name in the text format
_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created", "_info")


def _scrape(base: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"{base}/metrics", timeout=30).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_answers_consumers_slots_and_build_are_measured(make_served_feed: FeedFactory,
                                                         newest_pg_dsn: str) -> None:
    dsn = newest_pg_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE met (id int PRIMARY KEY)")
    name = make_served_feed(dsn, tables=("public.met",))
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(3):
            conn.execute("INSERT INTO met VALUES (%s)", (i,))
    make_served_feed.caught_up(name, dsn)
    service = make_served_feed.service
    base = service.http_url
    before = _scrape(base)
    with httpx.Client(base_url=base, timeout=30) as client:
        page = client.get(f"/v1/feeds/{name}/changes", params={"after": "earliest"}).json()
        assert len(page["changes"]) == 3
        assert client.get("/v1/feeds/nope/changes").status_code == 404
        assert client.get(f"/v1/feeds/{name}/changes", params={"table": "x"}).status_code == 422
        first = page["changes"][0]["commit_lsn"]
        assert client.put(f"/v1/feeds/{name}/consumers/slow", json={"cursor": first}).status_code == 200
    with grpc.insecure_channel(service.grpc_target) as channel:
        stub = feed_pb2_grpc.ChangeFeedStub(channel)
        assert stub.GetFeed(feed_pb2.GetFeedRequest(name=name), timeout=10).name == name
        with pytest.raises(grpc.RpcError) as missing:
            stub.GetFeed(feed_pb2.GetFeedRequest(name="nope"), timeout=10)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    time.sleep(0.2)  # a gRPC call's done callback runs after the client has its answer
    after = _scrape(base)

    def counted(surface: str, endpoint: str, code: str) -> float:
        labels = {"surface": surface, "endpoint": endpoint, "code": code}
        return _value(after, "pgfeed_requests_total", **labels) - _value(before, "pgfeed_requests_total", **labels)

    changes = "/v1/feeds/{feed}/changes"
    assert (counted("http", changes, "200"), counted("http", changes, "404"),
            counted("http", changes, "422")) == (1, 1, 1)
    assert (counted("grpc", "GetFeed", "OK"), counted("grpc", "GetFeed", "NOT_FOUND")) == (1, 1)
    assert _value(after, "pgfeed_build_info", version=pgfeed.__version__,
                  python=__import__("platform").python_version()) == 1
    head = parse_lsn(page["changes"][-1]["commit_lsn"])
    assert _value(after, "pgfeed_consumer_lag_bytes", feed=name, consumer="slow") == head - parse_lsn(first)
    assert 0 <= _value(after, "pgfeed_consumer_ack_age_seconds", feed=name, consumer="slow") < 60
    assert _value(after, "pgfeed_feed_slot_wal_status", feed=name, wal_status="reserved") == 1
    assert ("pgfeed_feed_reconnects_total", frozenset({("feed", name)})) in after
    # no max_slot_wal_keep_size on the test clusters: no bound to report
    assert not [k for k in after if k[0] == "pgfeed_feed_slot_safe_wal_bytes" and ("feed", name) in k[1]]


def _names(text: str) -> set[str]:
    return set(re.findall(r"\bpgfeed_[a-z_]+", text))


def test_alert_rules_and_dashboard_use_what_metrics_exposes(make_served_feed: FeedFactory,
                                                            newest_pg_dsn: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian's prometheus package) is installed by scripts/bootstrap"
    check = subprocess.run([promtool, "check", "rules", "alerts.yml"], cwd=DEPLOY / "prometheus",
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "SUCCESS: 8 rules found" in check.stdout, check.stdout + check.stderr
    tested = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=DEPLOY / "prometheus",
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr

    # Every pgfeed_* name the rules and the dashboard query is a family a live server exposes
    # (with a feed, a consumer and some traffic, so that labelled families have samples).
    with psycopg.connect(newest_pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE dash (id int PRIMARY KEY)")
        conn.execute("INSERT INTO dash VALUES (1)")
    name = make_served_feed(newest_pg_dsn, tables=("public.dash",))
    base = make_served_feed.service.http_url
    httpx.put(f"{base}/v1/feeds/{name}/consumers/c", json={"cursor": "earliest"}, timeout=30)
    httpx.get(f"{base}/v1/feeds/{name}/changes", timeout=30)
    families = {f.name for f in text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=30).text)}
    dashboard = json.loads((DEPLOY / "grafana" / "pgfeed-dashboard.json").read_text())
    queries = "\n".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    rules = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    for where, text in (("dashboard", queries), ("alert rules", rules)):
        used = _names(text)
        assert used, where
        unknown = {n for n in used if n not in families
                   and not any(n.endswith(s) and n[:-len(s)] in families for s in _SUFFIXES)}
        assert not unknown, f"{where} query metrics /metrics does not have: {sorted(unknown)}"
    assert len(dashboard["panels"]) >= 15
