"""LSN and cursor parsing, formatting and ordering: the one definition every layer uses."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgfeed_client import EARLIEST, Cursor, CursorError, format_lsn, parse_cursor, parse_lsn
from pgfeed_client._cursor import CURSOR_PATTERN


def test_lsn_round_trip_postgres_form():
    assert parse_lsn("16/B374D848") == 0x16_B374D848
    assert format_lsn(0x16_B374D848) == "16/B374D848"
    assert format_lsn(0) == "0/0"


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_lsn_round_trip_any(lsn):
    assert parse_lsn(format_lsn(lsn)) == lsn


@pytest.mark.parametrize("text", ["", "16", "16/", "/1", "G/1", "123456789/0", "1/2/3", "0x1/2", " 1 / 2"])
def test_malformed_lsn_says_expected_form(text):
    with pytest.raises(CursorError, match="expected X/Y"):
        parse_lsn(text)


def test_cursor_forms():
    assert parse_cursor("earliest") == EARLIEST == Cursor(0)
    assert parse_cursor("latest") == "latest"
    assert parse_cursor("16/B374D848") == Cursor(0x16_B374D848)
    assert parse_cursor("16/B374D848:41") == Cursor(0x16_B374D848, 41)
    assert str(Cursor(0x16_B374D848, 41)) == "16/B374D848:41"


@pytest.mark.parametrize("text", ["16/B374D848:", "16/B374D848:-1", "16/B374D848:x", "nope", "1/2:3:4"])
def test_malformed_cursor_names_every_accepted_form(text):
    with pytest.raises(CursorError) as info:
        parse_cursor(text)
    assert "earliest" in str(info.value) and "16/B374D848:41" in str(info.value)


def test_ordering_is_numeric_and_whole_transaction_sorts_last():
    # As strings "9/0" > "10/0"; numerically it is smaller.
    assert parse_cursor("9/0") < parse_cursor("10/0")
    assert Cursor(5, 0) < Cursor(5, 1) < Cursor(5) < Cursor(6, 0)
    assert Cursor(5).includes(5, 10**9) and not Cursor(5, 3).includes(5, 4)
    assert sorted([Cursor(6), Cursor(5), Cursor(5, 2)]) == [Cursor(5, 2), Cursor(5), Cursor(6)]


@given(st.from_regex(CURSOR_PATTERN))
def test_every_string_the_documented_pattern_admits_parses(text: str) -> None:
    parse_cursor(text)  # the OpenAPI document promises these are accepted
