"""One policy for every connection to a source (pgfeed.replication.connect): the session's
settings, a timeout and a name by default (the DSN's own win), and errors without the password."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from pgfeed.errors import SourceError
from pgfeed.replication import connect, session

UNREACHABLE = "host=/nonexistent/pgfeed-test port=1 dbname=shop user=cdc password=s3cr3t-pw"


def test_defaults_where_the_dsn_has_none() -> None:
    params = conninfo_to_dict(connect.conninfo("dbname=x", "pgfeed-backfill",
                                               options="-c synchronous_commit=on"))
    assert params["connect_timeout"] == str(connect.CONNECT_TIMEOUT)
    assert params["application_name"] == "pgfeed-backfill"
    assert params["options"] == session.connection_options() + " -c synchronous_commit=on"
    assert "replication" not in params
    stream = conninfo_to_dict(connect.conninfo("dbname=x", replication=True))
    assert stream["replication"] == "database" and stream["application_name"] == "pgfeed"


def test_the_dsn_own_settings_win() -> None:
    params = conninfo_to_dict(connect.conninfo(
        "dbname=x connect_timeout=3 application_name=mine options='-c work_mem=1MB'", "pgfeed-peek"))
    assert params["connect_timeout"] == "3" and params["application_name"] == "mine"
    assert params["options"] == session.connection_options("-c work_mem=1MB")


def test_an_invalid_dsn_is_a_source_error_without_the_password() -> None:
    with pytest.raises(SourceError, match="invalid source DSN") as caught:
        connect.conninfo("host=x password=s3cr3t-pw nonsense")
    assert "s3cr3t-pw" not in str(caught.value)


def test_failures_name_what_was_attempted_and_never_the_password() -> None:
    with pytest.raises(SourceError) as caught, connect.admin_connection(UNREACHABLE, "cannot free slot 's'"):
        raise AssertionError("not reached: the connection fails")
    message = str(caught.value)
    assert message.startswith("cannot free slot 's': ") and "s3cr3t-pw" not in message
    assert "\n" not in message  # one line, for logs and status
    with pytest.raises(SourceError, match="cannot open a replication connection") as caught:
        connect.connect(UNREACHABLE, replication=True)
    assert "s3cr3t-pw" not in str(caught.value)
