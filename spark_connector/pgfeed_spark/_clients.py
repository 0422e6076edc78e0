"""One FeedClient per Python worker process and server, kept across the tasks the worker runs.

Spark reuses Python workers (``spark.python.worker.reuse``), so a micro-batch's read task
would otherwise pay for a new HTTP client (TLS context included, 50-200 ms on these cores)
and a new TCP connection each time: most of a small micro-batch's read.
"""

from __future__ import annotations

import os
import threading

from pgfeed_client import FeedClient
from pgfeed_spark._options import FeedOptions

__all__ = ["shared_client"]

_lock = threading.Lock()
_clients: dict[tuple[object, ...], FeedClient] = {}


def shared_client(opts: FeedOptions, partition: int = 0) -> FeedClient:
    """The worker's client for the replica of ``partition`` and ``opts``' credentials; never
    close it.

    Keyed by process id as well: a client made before a fork (Spark's daemon forks workers)
    must not share its sockets with the child."""
    url = opts.url_for(partition)
    key = (os.getpid(), url, opts.token, opts.timeout, opts.ca_bundle, opts.client_cert)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = opts.client(url=url)
        return client
