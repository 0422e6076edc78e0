"""Replication commands: protocol version per server, and quoting of hostile names."""

from __future__ import annotations

import pytest
from psycopg import sql

from pgfeed.replication.commands import (
    OLDEST_SERVER,
    ReplicationLiteral,
    create_replication_slot,
    max_proto_version,
    publication_names,
    source_refusal,
    start_replication,
    streaming_mode,
)


def text(cmd: sql.Composable) -> str:
    return cmd.as_string()


@pytest.mark.parametrize(("version", "proto"), [
    (90600, 1), (130015, 1), (140000, 2), (140019, 2), (150018, 3), (160000, 4), (170004, 4),
    (180006, 4), (190000, 4)])
def test_max_proto_version(version: int, proto: int) -> None:
    assert max_proto_version(version) == proto


@pytest.mark.parametrize(("requested", "messages", "proto", "mode"), [
    (True, False, 4, "on"), (True, False, 2, "on"), (True, False, 1, "off"),
    (False, False, 4, "off"),
    # A streamed message cannot be tied to its subtransaction: messages mean whole transactions.
    (True, True, 4, "off"), (True, True, 3, "off"), (False, True, 4, "off")])
def test_streaming_mode(requested: bool, messages: bool, proto: int, mode: str) -> None:
    assert streaming_mode(requested, messages=messages, proto_version=proto) == mode


def test_start_replication_full_options() -> None:
    cmd = start_replication("pgfeed_shop", 0x16B374D848, proto_version=4, publications=["pub"],
                            streaming="parallel", messages=True, two_phase=True)
    assert text(cmd) == (
        'START_REPLICATION SLOT "pgfeed_shop" LOGICAL 16/B374D848 (proto_version \'4\', '
        'publication_names \'"pub"\', streaming \'parallel\', messages \'true\', '
        "binary 'false', two_phase 'true')")


def test_start_replication_options_follow_the_version() -> None:
    assert text(start_replication("s", 0, proto_version=1, publications=["p"])) == (
        "START_REPLICATION SLOT \"s\" LOGICAL 0/0 (proto_version '1', publication_names '\"p\"')")
    v2 = text(start_replication("s", 1, proto_version=2, publications=["p"], streaming="on"))
    assert "streaming 'on'" in v2 and "messages 'false'" in v2 and "binary 'false'" in v2
    assert "two_phase" not in v2 and v2.startswith('START_REPLICATION SLOT "s" LOGICAL 0/1 (')
    v3 = text(start_replication("s", 1, proto_version=3, publications=["p"]))
    assert "two_phase 'false'" in v3 and "streaming 'off'" in v3


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"proto_version": 1, "streaming": "on"}, "streaming needs"),
    ({"proto_version": 3, "streaming": "parallel"}, "parallel"),
    ({"proto_version": 2, "two_phase": True}, "two_phase"),
    ({"proto_version": 1, "messages": True}, "messages"),
    ({"proto_version": 5}, "proto_version"),
    ({"proto_version": 0}, "proto_version"),
    ({"proto_version": 4, "streaming": "yes"}, "streaming must be"),
])
def test_start_replication_refuses_what_the_version_lacks(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        start_replication("s", 0, publications=["p"], **kwargs)


@pytest.mark.parametrize("lsn", [-1, 1 << 64])
def test_start_lsn_range(lsn: int) -> None:
    with pytest.raises(ValueError, match="LSN"):
        start_replication("s", lsn, proto_version=1, publications=["p"])


def test_hostile_publication_names_are_quoted_identifiers_in_one_literal() -> None:
    # pgoutput splits publication_names with SplitIdentifierString: commas split, quotes group,
    # "" is a quote, unquoted names are folded to lower case. Each name is a quoted identifier.
    names = ['a"b,c', "Upper Case", "x'y", "plain", " sp ace", "é,ü", "back\\slash"]
    literal = text(publication_names(names))
    assert literal == """'"a""b,c","Upper Case","x''y","plain"," sp ace","é,ü","back\\slash"'"""
    assert _split_identifiers(_unquote_literal(literal)) == names


def test_replication_literals_never_use_escape_strings() -> None:
    # The walsender grammar has no E'...' form: a backslash is an ordinary character there.
    assert ReplicationLiteral("a\\b'c").as_string() == "'a\\b''c'"
    assert sql.Literal("a\\b").as_string().strip().startswith("E'")  # why sql.Literal is not used
    cmd = text(start_replication("s", 0, proto_version=1, publications=["x\\y"]))
    assert "publication_names '\"x\\y\"'" in cmd and " E'" not in cmd
    with pytest.raises(ValueError, match="NUL"):
        ReplicationLiteral("a\x00b")
    with pytest.raises(TypeError):
        ReplicationLiteral(5)  # type: ignore[arg-type]


def test_publication_names_validation() -> None:
    with pytest.raises(ValueError, match="at least one"):
        publication_names([])
    with pytest.raises(ValueError, match="empty"):
        publication_names(["ok", ""])
    with pytest.raises(TypeError):
        publication_names("pub")  # a string is a sequence of one-letter names: refuse it


def test_hostile_slot_name_is_a_quoted_identifier() -> None:
    cmd = text(start_replication('s"; DROP', 0, proto_version=1, publications=["p"]))
    assert cmd.startswith('START_REPLICATION SLOT "s""; DROP" LOGICAL 0/0 ')
    create = text(create_replication_slot('x" y'))
    assert create == "CREATE_REPLICATION_SLOT \"x\"\" y\" LOGICAL pgoutput (SNAPSHOT 'nothing')"


@pytest.mark.parametrize(("snapshot", "two_phase", "expected"), [
    ("nothing", False, "(SNAPSHOT 'nothing')"),
    ("export", False, "(SNAPSHOT 'export')"),
    ("export", True, "(SNAPSHOT 'export', TWO_PHASE)"),
    ("nothing", True, "(SNAPSHOT 'nothing', TWO_PHASE)"),
])
def test_create_replication_slot(snapshot: str, two_phase: bool, expected: str) -> None:
    cmd = text(create_replication_slot("s", snapshot=snapshot, two_phase=two_phase, server_version=180000))
    assert cmd == f'CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput {expected}'


def test_create_replication_slot_old_syntax_and_errors() -> None:
    assert text(create_replication_slot("s", snapshot="export", server_version=140000)) == (
        'CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput EXPORT_SNAPSHOT')
    assert text(create_replication_slot("s", server_version=140000)).endswith(" NOEXPORT_SNAPSHOT")
    with pytest.raises(ValueError, match="PostgreSQL 15"):
        create_replication_slot("s", two_phase=True, server_version=140000)
    with pytest.raises(ValueError, match="snapshot"):
        create_replication_slot("s", snapshot="use")


# -- a model of the server's parsing, to check the round trip --------------------------------------


def _unquote_literal(literal: str) -> str:
    assert literal.startswith("'") and literal.endswith("'")
    return literal[1:-1].replace("''", "'")


def _split_identifiers(raw: str) -> list[str]:
    """PostgreSQL's SplitIdentifierString(raw, ',') (varlena.c), without whitespace trimming
    subtleties beyond what quoted names need."""
    out, i = [], 0
    while True:
        while i < len(raw) and raw[i].isspace():
            i += 1
        if i < len(raw) and raw[i] == '"':
            name, i = "", i + 1
            while True:
                j = raw.index('"', i)
                if raw[j + 1:j + 2] == '"':
                    name += raw[i:j] + '"'
                    i = j + 2
                else:
                    name += raw[i:j]
                    i = j + 1
                    break
        else:
            j = raw.find(",", i)
            j = len(raw) if j < 0 else j
            name, i = raw[i:j].strip().lower(), j
        out.append(name)
        while i < len(raw) and raw[i].isspace():
            i += 1
        if i >= len(raw):
            return out
        assert raw[i] == ",", raw[i:]
        i += 1


def test_source_refusal_names_the_oldest_server_and_two_phase() -> None:
    assert OLDEST_SERVER == 140000
    assert source_refusal(130012, two_phase=False) == \
        "the source runs PostgreSQL 13.12; pgfeed needs PostgreSQL 14 or later"
    assert source_refusal(140023, two_phase=False) is None
    assert source_refusal(140023, two_phase=True) == \
        "two_phase needs PostgreSQL 15 or later; the source runs PostgreSQL 14.23"
    assert source_refusal(150018, two_phase=True) is None
    assert source_refusal(180001, two_phase=True) is None


def test_failover_slot_needs_postgresql_17() -> None:
    cmd = text(create_replication_slot("s", two_phase=True, failover=True, server_version=170000))
    assert cmd == "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'nothing', TWO_PHASE, FAILOVER)"
    with pytest.raises(ValueError, match="PostgreSQL 17"):
        create_replication_slot("s", failover=True, server_version=160004)
    assert source_refusal(160004, two_phase=False, failover=True) == (
        "failover needs PostgreSQL 17 or later (slots synchronized to standbys); the source runs "
        "PostgreSQL 16.4")
    assert source_refusal(170000, two_phase=True, failover=True) is None
    assert source_refusal(160004, two_phase=False) is None
