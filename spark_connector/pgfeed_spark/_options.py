"""The data source's options, parsed once on the driver into a picklable value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pgfeed_client import ColumnInfo, FeedClient, parse_cursor
from pgfeed_client._headers import MAX_LIMIT, qualified_table
from pgfeed_spark._evolve import DEFAULT_POLICY, POLICIES, Lineage
from pgfeed_spark._replicas import parse_urls, reachable_first

__all__ = ["FeedOptions"]

_TYPED_OPS = "insert,update,delete,read,truncate"  # truncates: a mirror must see them


def _get(options: Mapping[str, Any], name: str) -> str | None:
    """Option lookup ignoring case (Spark's options are case-insensitive; a plain dict is not)."""
    if name in options:
        return str(options[name])
    lowered = name.lower()
    for key, value in options.items():
        if str(key).lower() == lowered:
            return str(value)
    return None


def _integer(options: Mapping[str, Any], name: str, default: int | None, least: int) -> int | None:
    text = _get(options, name)
    if text is None or text == "":
        return default
    kind = "a positive integer" if least > 0 else "an integer >= 0"
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"pgfeed option {name!r} must be {kind}, not {text!r}") from None
    if value < least:
        raise ValueError(f"pgfeed option {name!r} must be {kind}, not {text!r}")
    return value


def _positive(options: Mapping[str, Any], name: str, default: int | None) -> int | None:
    return _integer(options, name, default, 1)


def _count(options: Mapping[str, Any], name: str, default: int) -> int:
    return _integer(options, name, default, 0) or 0


def _client_cert(options: Mapping[str, Any]) -> tuple[str, str] | None:
    cert, key = _get(options, "clientCert") or None, _get(options, "clientKey") or None
    if (cert is None) != (key is None):
        raise ValueError("pgfeed options 'clientCert' and 'clientKey' go together")
    return None if cert is None or key is None else (cert, key)


@dataclass(frozen=True, slots=True)
class FeedOptions:
    """Everything a reader needs, on the driver and on executors (plain data, picklable).

    Options: ``url`` and ``feed`` (required; ``url`` may list several replicas of one service,
    comma-separated, or ``urls`` may: partitions go round robin over them, each moving on to the
    next when one refuses connections), ``from`` (default ``earliest``), ``to`` (batch,
    default ``latest``), ``partitions`` (default 4), ``table`` (``schema.name``: typed columns),
    ``tables``/``ops`` (comma-separated filters), ``token``, ``consumer`` (streaming: acknowledge
    committed offsets), ``maxRowsPerTrigger``, ``wireFormat`` (``arrow`` or ``json``),
    ``pageSize`` (changes per request), ``readAhead`` (arrow: pages a partition fetches
    while Spark converts the current one, default 1, 0 for none), ``timeout`` (seconds), and for https ``caBundle`` (PEM
    CAs to trust) with ``clientCert``/``clientKey`` (PEM) when the server requires a client
    certificate (the files must be readable on the driver and on every executor).
    ``schemaEvolution`` (typed reads: ``addNewColumns``, the default, ``fail`` or ``rescue``;
    see ``pgfeed_spark._evolve``) says what a table's schema changes do.
    """

    url: str
    feed: str
    start: str = "earliest"
    end: str = "latest"
    partitions: int = 4
    table: str | None = None
    tables: str | None = None
    ops: str | None = None
    token: str | None = None
    consumer: str | None = None
    max_rows_per_trigger: int | None = None
    wire: str = "arrow"
    page_size: int = MAX_LIMIT  # pages as large as the server allows
    read_ahead: int = 1
    timeout: float = 60.0
    columns: tuple[ColumnInfo, ...] = field(default=())  # typed reads: the table's columns
    ca_bundle: str | None = None
    client_cert: tuple[str, str] | None = None
    urls: tuple[str, ...] = ()  # every replica, ``url`` first
    schema_evolution: str = DEFAULT_POLICY
    lineage: Lineage | None = None  # typed reads: the table's versions the schema was made from

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> FeedOptions:
        urls, feed = parse_urls(_get(options, "url"), _get(options, "urls")), _get(options, "feed")
        url = urls[0] if urls else None
        if not url or not feed:
            raise ValueError("the pgfeed data source needs options 'url' (e.g. "
                             "http://127.0.0.1:8000) and 'feed' (the feed's name)")
        start = _get(options, "from") or "earliest"
        end = _get(options, "to") or "latest"
        parse_cursor(start)  # a malformed cursor fails here, on the driver, with the expected form
        parse_cursor(end)
        table = _get(options, "table") or None
        if table is not None:
            table = qualified_table(table)
        wire = (_get(options, "wireFormat") or "arrow").lower()
        if wire not in ("arrow", "json"):
            raise ValueError(f"pgfeed option 'wireFormat' must be 'arrow' or 'json', not {wire!r}")
        ops = _get(options, "ops") or (_TYPED_OPS if table else None)
        policy = _get(options, "schemaEvolution") or DEFAULT_POLICY
        policy = next((p for p in POLICIES if p.lower() == policy.lower()), policy)
        if policy not in POLICIES:
            raise ValueError(f"pgfeed option 'schemaEvolution' must be one of {', '.join(POLICIES)}"
                             f", not {policy!r}")
        return cls(
            url=url, urls=urls, feed=feed, start=start, end=end,
            partitions=_positive(options, "partitions", 4) or 4, table=table,
            tables=table or _get(options, "tables") or None, ops=ops,
            token=_get(options, "token") or None, consumer=_get(options, "consumer") or None,
            max_rows_per_trigger=_positive(options, "maxRowsPerTrigger", None), wire=wire,
            page_size=_positive(options, "pageSize", MAX_LIMIT) or MAX_LIMIT,
            read_ahead=_count(options, "readAhead", 1),
            timeout=float(_get(options, "timeout") or 60.0),
            ca_bundle=_get(options, "caBundle") or None, client_cert=_client_cert(options),
            schema_evolution=policy,
        )

    def url_for(self, partition: int = 0) -> str:
        """The replica for ``partition`` (round robin), or the next one that accepts
        connections."""
        return reachable_first(self.urls, partition) if len(self.urls) > 1 else self.url

    def client(self, partition: int = 0, url: str | None = None) -> FeedClient:
        """A client of ``url``, or of the replica for ``partition``."""
        return FeedClient(url or self.url_for(partition), token=self.token, timeout=self.timeout,
                          ca_bundle=self.ca_bundle, client_cert=self.client_cert)
