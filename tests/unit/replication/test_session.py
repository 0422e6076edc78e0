"""One replication session for the feed's stream and ``pgfeed peek`` (issue 13, item 8)."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from pgfeed.cli.peek import PeekError, peek_options
from pgfeed.replication import session
from pgfeed.replication.commands import start_replication
from pgfeed.replication.connect import conninfo


def test_pinned_settings_come_after_the_dsn_own() -> None:
    options = session.connection_options("-c bytea_output=escape -c search_path=x")
    assert options.startswith("-c bytea_output=escape -c search_path=x ")
    assert options.endswith("-c bytea_output=hex")  # the last -c wins in PostgreSQL
    for name, value in session.SETTINGS:
        assert f"-c {name}={value}" in session.connection_options()
    stream = conninfo_to_dict(conninfo("dbname=x options='-c work_mem=1MB'", replication=True))
    assert stream["options"] == session.connection_options("-c work_mem=1MB")


@pytest.mark.parametrize("proto", [1, 2, 3, 4])
def test_peek_asks_pgoutput_what_the_stream_asks(proto: int) -> None:
    # A feed that takes messages reads whole transactions, as peek does.
    streaming = session.streaming_mode(True, messages=proto >= 2, proto_version=proto)
    command = start_replication("s", 0, proto_version=proto, publications=["p", 'q"r'],
                                streaming=streaming, messages=proto >= 2,
                                two_phase=proto >= 3).as_string()
    options = peek_options(proto=proto, publications=["p", 'q"r'], two_phase=True)
    pairs = [f"{k} '{v}'" for k, v in zip(options[::2], options[1::2])]
    assert command.endswith("(" + ", ".join(pairs) + ")")


def test_peek_refuses_what_the_protocol_lacks() -> None:
    with pytest.raises(PeekError, match="publication"):
        peek_options(proto=4, publications=[])
