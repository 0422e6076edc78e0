"""Settings precedence, the persisted feed catalogue, and secrets kept out of what is shown."""

import os
import stat

from pgfeed.config import Settings
from pgfeed.dsn import mask_dsn, scrub
from pgfeed.feeds.catalogue import Catalogue
from pgfeed.feeds.model import FeedOptions, FeedSpec, Retention


def test_flags_over_environment_over_toml(tmp_path, monkeypatch):
    toml = tmp_path / "pgfeed.toml"
    toml.write_text('http_port = 9000\ngrpc_port = 9001\ndata_dir = "/from/toml"\nread_tokens = ["r1"]\n')
    monkeypatch.setenv("PGFEED_GRPC_PORT", "9100")
    monkeypatch.setenv("PGFEED_DATA_DIR", "/from/env")
    settings = Settings.load(toml, data_dir="/from/flag", http_port=None)
    assert settings.http_port == 9000  # only the file sets it
    assert settings.grpc_port == 9100  # environment beats the file
    assert str(settings.data_dir) == "/from/flag"  # flag beats both
    assert settings.read_tokens[0].get_secret_value() == "r1"
    assert "r1" not in repr(settings)


def test_catalogue_survives_reopen_and_is_private(tmp_path):
    path = tmp_path / "catalogue.json"
    spec = FeedSpec(name="shop", dsn="host=h password=pw", tables=("public.a",),
                    options=FeedOptions(toast="omit", retention=Retention(hours=1, bytes=10)))
    cat = Catalogue(path)
    cat.put(spec)
    cat.put(FeedSpec(name="other", dsn="host=h", all_tables=True))
    cat.set_paused("other", True)
    reopened = Catalogue(path)
    assert reopened.items() == [(spec, False), (FeedSpec(name="other", dsn="host=h", all_tables=True), True)]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    reopened.remove("shop")
    assert [s.name for s, _ in Catalogue(path).items()] == ["other"]


def test_table_filters_persist_and_an_old_catalogue_loads(tmp_path):
    """Issue 27.5: row filters and column lists survive a reopen; a catalogue written before them
    (no ``table_filters``, no ``publish_generated_columns``) loads with none."""
    import json

    from pgfeed.replication.slots import PublishedTable

    path = tmp_path / "catalogue.json"
    spec = FeedSpec(name="shop", dsn="host=h", tables=("public.orders", "public.items"),
                    table_filters=(PublishedTable("public.orders", "region = 'eu'", ("id", "region")),
                                   PublishedTable("public.items", None, ("id",))),
                    options=FeedOptions(publish_generated_columns=True))
    Catalogue(path).put(spec)
    assert Catalogue(path).items() == [(spec, False)]
    data = json.loads(path.read_text())
    del data["feeds"][0]["spec"]["table_filters"]
    del data["feeds"][0]["spec"]["options"]["publish_generated_columns"]
    path.write_text(json.dumps(data))
    old = Catalogue(path).items()[0][0]
    assert old.table_filters == () and old.options.publish_generated_columns is False
    assert old.tables == ("public.orders", "public.items")


def test_dsn_passwords_never_shown():
    assert "s3cret" not in mask_dsn("host=x dbname=y user=z password=s3cret")
    assert "s3cret" not in mask_dsn("postgresql://u:s3cret@h:5432/db")
    assert "s3cret" not in mask_dsn("not a dsn password=s3cret '")
    assert "host=x" in mask_dsn("host=x password=s3cret")
    assert scrub('connection failed for password "s3cret"', "host=x password=s3cret") == \
        'connection failed for password "***"'
