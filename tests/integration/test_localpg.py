"""The harness itself: each cluster is real, logical-decoding capable and of the version it claims."""

import psycopg
import pytest

pytestmark = pytest.mark.pg


def test_cluster_is_logical_and_right_version(pg_cluster, pg_dsn):
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SHOW wal_level").fetchone()[0] == "logical"
        major = conn.info.server_version // 10000
        assert str(major) == pg_cluster.version
        slot = conn.execute(
            "SELECT slot_name FROM pg_create_logical_replication_slot('harness_probe', 'pgoutput')"
        ).fetchone()[0]
        assert slot == "harness_probe"
