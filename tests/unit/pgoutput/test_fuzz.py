"""Deterministic fuzzing: 100k random and mutated inputs give a valid message or a DecodeError.

Any message that does decode must re-encode to the very same bytes, and the optimistic hot-path
decoders (Insert/Update/Delete) must agree with the checked ones.
"""

from __future__ import annotations

import importlib
import random
import time

from pgfeed.errors import DecodeError
from pgfeed.pgoutput import decode
from pgfeed.pgoutput.encode import encode
from pgfeed.pgoutput.messages import Message, StreamStartMessage
from tests.unit.pgoutput.samples import SAMPLES

# The package re-exports the function ``decode``, which shadows the submodule as an attribute.
decode_module = importlib.import_module("pgfeed.pgoutput.decode")

ROUNDS = 100_000
TAGS = b"BCORYIUDTMSEcAbPKrp"
_CHECKED = {
    ord("I"): decode_module._checked_insert,
    ord("U"): decode_module._checked_update,
    ord("D"): decode_module._checked_delete,
}
_INTERESTING = [b"\x00", b"\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00",
                b"n", b"u", b"t", b"b", b"N", b"K", b"O", b"\xc3", b"\xed\xa0\x80"]


def _mutate(rng: random.Random, buf: bytearray) -> bytes:
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(6)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip a bit
            i = min(pos, len(buf) - 1)
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # replace a byte
            buf[min(pos, len(buf) - 1)] = rng.randrange(256)
        elif op == 2:  # truncate
            del buf[pos:]
        elif op == 3:  # insert random bytes
            buf[pos:pos] = rng.randbytes(rng.randint(1, 4))
        elif op == 4:  # insert an interesting value (big lengths, kinds, bad UTF-8)
            buf[pos:pos] = rng.choice(_INTERESTING)
        else:  # delete a few bytes
            del buf[pos:pos + rng.randint(1, 4)]
    return bytes(buf)


def _inputs(rng: random.Random) -> list[tuple[bytes, bool]]:
    seeds = [(encode(m, in_stream=s), s) for m, s in SAMPLES]
    out = []
    for i in range(ROUNDS):
        if i % 4 == 0:  # random bytes, mostly behind a valid tag
            body = rng.randbytes(rng.randint(0, 40))
            tag = bytes([rng.choice(TAGS)]) if rng.random() < 0.9 else rng.randbytes(1)
            out.append((tag + body, rng.random() < 0.5))
        else:
            buf, in_stream = rng.choice(seeds)
            if rng.random() < 0.05:
                in_stream = not in_stream
            out.append((_mutate(rng, bytearray(buf)), in_stream))
    return out


def _check_valid(buf: bytes, in_stream: bool, msg: Message) -> None:
    if isinstance(msg, StreamStartMessage):
        assert buf[:5] == encode(msg)[:5] and len(buf) == 6  # any byte but 1 means "not first"
    else:
        assert encode(msg, in_stream=in_stream and buf[0] in b"RYIUDTM") == buf
    checked = _CHECKED.get(buf[0])
    if checked is not None:
        assert checked(buf, in_stream) == msg


def test_fuzz_only_decode_error_or_valid() -> None:
    rng = random.Random(20260522)
    inputs = _inputs(rng)
    started = time.perf_counter()
    ok = errors = 0
    for buf, in_stream in inputs:
        try:
            msg = decode(buf, in_stream=in_stream)
        except DecodeError as err:
            errors += 1
            assert err.offset is not None and 0 <= err.offset <= len(buf), (buf, str(err))
            assert err.msg_type is not None or not buf, (buf, str(err))
        else:
            ok += 1
            _check_valid(buf, in_stream, msg)
    elapsed = time.perf_counter() - started
    assert ok + errors == ROUNDS
    assert ok > 1000 and errors > 50_000  # both outcomes are exercised
    assert elapsed < 20, f"fuzzing took {elapsed:.1f}s"
