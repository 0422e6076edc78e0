"""Source failover at the edges: multi-host DSNs stay masked, list settings parse as the server's."""

from __future__ import annotations

import pytest

from pgfeed.dsn import mask_dsn, scrub
from pgfeed.replication.slots import setting_list


@pytest.mark.parametrize(("value", "names"), [
    ("", []),
    ("standby1", ["standby1"]),
    ("a, b,c", ["a", "b", "c"]),
    ('"Mixed Case", "q""uote",plain', ["Mixed Case", 'q"uote', "plain"]),
    (" , a ,", ["a"]),
])
def test_setting_list_splits_like_the_server(value: str, names: list[str]) -> None:
    assert setting_list(value) == names


@pytest.mark.parametrize("dsn", [
    "host=a,b port=5432,5433 dbname=x user=u password=s3cret target_session_attrs=read-write",
    "postgresql://u:s3cret@a:5432,b:5433/x?target_session_attrs=read-write",
])
def test_multi_host_dsn_is_masked_and_keeps_its_hosts(dsn: str) -> None:
    masked = mask_dsn(dsn)
    assert "s3cret" not in masked and "password=***" in masked
    assert "host=a,b" in masked and "port=5432,5433" in masked
    assert "target_session_attrs=read-write" in masked
    assert scrub("connection to a,b failed: password=s3cret", dsn) == \
        "connection to a,b failed: password=***"
