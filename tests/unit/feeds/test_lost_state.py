"""Issue 26: a lost slot and a resync's gaps are part of the feed's catalogue entry, so a restart
keeps a feed failed (and its gaps listed) until an operator resyncs it."""

from __future__ import annotations

import json
from pathlib import Path

from pgfeed.feeds.catalogue import Catalogue
from pgfeed.feeds.model import FeedSpec, Gap, SlotLost
from pgfeed.feeds.supervisor import lost_message


def test_a_lost_slot_and_gaps_survive_the_catalogue(tmp_path: Path) -> None:
    lost = SlotLost(at=1_800_000_000.5, reason="invalidated: the WAL it needed was removed "
                    "(max_slot_wal_keep_size) (wal_removed)", last_lsn=0x16B374D848, slot="pgfeed_shop")
    gap = Gap(lost_after=0x100, resumed_at=0x200, reason="dropped", at=1_700_000_000.0,
              marker_lsn=0x1FF)
    spec = FeedSpec(name="shop", dsn="dbname=shop", tables=("public.orders",), slot_lost=lost,
                    gaps=(gap,))
    path = tmp_path / "catalogue.json"
    Catalogue(path).put(spec)
    json.loads(path.read_text())  # plain JSON
    [(again, paused)] = Catalogue(path).items()
    assert again == spec and again.slot_lost == lost and again.gaps == (gap,) and not paused
    # an entry written before issue 26 has neither
    old = {"feeds": [{"spec": {"name": "old", "dsn": "dbname=x", "tables": ["public.t"]}}]}
    path.write_text(json.dumps(old))
    [(before, _)] = Catalogue(path).items()
    assert before.slot_lost is None and before.gaps == ()


def test_the_lost_message_says_what_was_lost_and_the_fix() -> None:
    spec = FeedSpec(name="shop", dsn="dbname=shop", slot_lost=SlotLost(1.0, "dropped", 0x16B374D848))
    message = lost_message(spec)
    assert message is not None
    assert "changes were lost" in message and "'pgfeed_shop' was dropped" in message
    assert "16/B374D848" in message and "pgfeed feeds resync shop" in message
    assert lost_message(FeedSpec(name="ok", dsn="dbname=x")) is None
