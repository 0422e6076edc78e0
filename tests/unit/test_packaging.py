"""The things a newcomer and an operator rely on: the three distributions build from a clean clone
(pgfeed, the server; pgfeed-client, what applications install; pgfeed-spark, what Spark jobs
install), each from its own folder and under names pgfeed owns; the README's install command works
from a clean clone; the clients work without the server's dependencies; the Docker image installs
the wheels only; CI = README command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pgfeed.localpg import free_port
from pgfeed_client import FeedClient, parse_lsn
from tests.fixtures.fix_pg import Clusters, create_database, drop_slots

ROOT = Path(__file__).resolve().parents[2]

# What the image's final stage runs after installing the wheel (the Dockerfile has the same line):
# the compiled transcoder must be the one in use, and PGFEED_IMPL=c fails without it.
IMPORT_CHECK = ("import pgfeed.encoding.transcode as t, pgfeed.encoding._transcode as c; "
                "assert t.IMPLEMENTATION == 'c', t.IMPLEMENTATION; print(c.__file__)")


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _clean_clone(dest: Path) -> Path:
    """The tracked files as they are now (a fresh clone has nothing else: no .so, no build/)."""
    tracked = _run("git", "ls-files", "-z", cwd=ROOT).split("\0")
    for name in filter(None, tracked):
        src = ROOT / name
        if src.is_file():  # a file deleted but not yet committed is not in a clone either
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(src.read_bytes())
    return dest


# Each folder is one distribution: its metadata beside the packages it ships.
DISTRIBUTIONS = {"service": "pgfeed", "clients": "pgfeed-client", "spark_connector": "pgfeed-spark"}


@dataclass(frozen=True)
class Wheels:
    server: Path  # pgfeed (service/): the import name pgfeed and its compiled modules
    client: Path  # pgfeed-client (clients/): pgfeed_client, pgfeed_proto
    spark: Path  # pgfeed-spark (spark_connector/): pgfeed_spark


def _clean_env() -> dict[str, str]:
    """Nothing of this process's environment may point at the sources: a PYTHONPATH holding the
    checkout (the Spark fixture sets one) makes pip take its egg-info for an installed pgfeed."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PGFEED_IMPL")}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    """The three distributions built once, from a clean clone, as the image's builder stage does."""
    tmp = tmp_path_factory.mktemp("wheels")
    src = _clean_clone(tmp / "src")
    assert not list(src.rglob("*.so")), "a clean clone holds no compiled module"
    dist = tmp / "dist"
    # --no-build-isolation: the shared venv's setuptools, so the step needs no network
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", dist, *(src / folder for folder in DISTRIBUTIONS), cwd=tmp, env=_clean_env())
    (server,) = dist.glob("pgfeed-0*.whl")
    (client,) = dist.glob("pgfeed_client-*.whl")
    (spark,) = dist.glob("pgfeed_spark-*.whl")
    return Wheels(server, client, spark)


@pytest.fixture(scope="module")
def server_venv(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding both wheels (installed without dependencies, from the wheels alone)."""
    tmp = tmp_path_factory.mktemp("server-venv")
    venv, env = tmp / "venv", _clean_env()
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp, env=env)
    vpy = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", vpy, "install", "-q", "--no-deps", "--no-index",
         wheels.server, wheels.client, cwd=tmp, env=env)
    # The dependencies come from the shared venv (appended after the fresh venv's own
    # site-packages, so the installed wheels win; the shared venv's editable pgfeed is a .pth
    # there, which a path line does not process).
    (_site(vpy) / "zz_shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _site(vpy: Path) -> Path:
    return Path(_run(vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     cwd=vpy.parent, env=_clean_env()).strip())


def _metadata_requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(meta).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:")]


@pytest.mark.slow
def test_each_wheel_holds_its_own_import_names(wheels: Wheels) -> None:
    """pgfeed installs ``pgfeed`` only, pgfeed-client the clients and the gRPC stubs, pgfeed-spark
    the data source: no top-level name another project may own (``service``, ``clients``,
    ``spark_connector``), no file in two."""
    server, client, spark = (zipfile.ZipFile(w).namelist()
                             for w in (wheels.server, wheels.client, wheels.spark))

    def tops(names: list[str]) -> set[str]:
        return {n.split("/")[0] for n in names if ".dist-info/" not in n}

    assert tops(server) == {"pgfeed"}
    assert tops(client) == {"pgfeed_client", "pgfeed_proto"}
    assert tops(spark) == {"pgfeed_spark"}
    assert any(re.fullmatch(r"pgfeed/encoding/_transcode\.cpython-.*\.so", n) for n in server), server
    assert any(re.fullmatch(r"pgfeed/backfill/_rows\.cpython-.*\.so", n) for n in server), server
    assert any(re.fullmatch(r"pgfeed/assembler/_framing\.cpython-.*\.so", n) for n in server), server
    assert any(re.fullmatch(r"pgfeed/replication/_receive\.cpython-.*\.so", n) for n in server), server
    assert "pgfeed/encoding/transcode.py" in server and "pgfeed/http_api/static/ui/index.html" in server
    assert {"pgfeed_client/__init__.py", "pgfeed_proto/v1/feed_pb2.py",
            "pgfeed_proto/v1/feed_pb2_grpc.py"} <= set(client)
    assert "pgfeed_spark/__init__.py" in spark
    # every subpackage of service/pgfeed is in the server wheel (setup.py finds them)
    packages = {p.parent.relative_to(ROOT / "service").as_posix()
                for p in (ROOT / "service" / "pgfeed").rglob("__init__.py")}
    assert {f"{p}/__init__.py" for p in packages} <= set(server)
    # one version; the server pins both clients at it; the clients need no server dependency
    version = _metadata_version(wheels.server)
    assert version == _metadata_version(wheels.client) == _metadata_version(wheels.spark)
    assert f"pgfeed-client[grpc]=={version}" in _metadata_requires(wheels.server)
    assert f'pgfeed-spark=={version}; extra == "spark"' in _metadata_requires(wheels.server)
    base = [r for r in _metadata_requires(wheels.client) if "extra ==" not in r]
    assert sorted(re.split(r"[<>=\[ ]", r)[0] for r in base) == ["httpx", "orjson"], base
    assert f"pgfeed-client=={version}" in _metadata_requires(wheels.spark)


def _metadata_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


@pytest.mark.slow
def test_wheel_from_clean_clone_uses_compiled_transcoder(server_venv: Path, tmp_path: Path) -> None:
    """Install the wheels the image installs into a fresh venv, and import them from a directory
    without sources: what `docker build` does, minus the engine."""
    env, vpy = _clean_env(), server_venv / "bin" / "python"
    neutral = tmp_path / "elsewhere"
    neutral.mkdir()
    compiled = Path(_run(vpy, "-c", IMPORT_CHECK, cwd=neutral, env=env).strip())
    assert compiled.is_relative_to(_site(vpy)), compiled
    out = _run(vpy, "-c", "import pgfeed.encoding.transcode as t; print(t.IMPLEMENTATION)",
               cwd=neutral, env={**env, "PGFEED_IMPL": "c"})
    assert out.strip() == "c"
    # the console script of the image's CMD, from the installed package alone
    assert "serve" in _run(server_venv / "bin" / "pgfeed", "--help", cwd=neutral, env=env)
    # and the same import check is the one the Dockerfile runs
    assert IMPORT_CHECK in (ROOT / "Dockerfile").read_text()


# What a Spark job runs with pgfeed-client alone: the server's dependencies are not importable,
# and a batch read of a served table gives its rows.
SPARK_READ = """
import importlib.util, json, os, sys
absent = [m for m in ("fastapi", "uvicorn", "psycopg", "starlette", "pgfeed")
          if importlib.util.find_spec(m) is not None]
from pyspark.sql import SparkSession
from pgfeed_spark import PgFeedDataSource
spark = (SparkSession.builder.master("local[2]").appName("pgfeed-client-only")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").config("spark.sql.shuffle.partitions", "2")
         .getOrCreate())
spark.dataSource.register(PgFeedDataSource)
url, feed = sys.argv[1], sys.argv[2]
df = (spark.read.format("pgfeed").option("url", url).option("feed", feed)
      .option("table", "public.pkg").option("partitions", 2).load())
rows = sorted((r["id"], r["v"], r["_op"]) for r in df.select("id", "v", "_op").collect())
workers = spark.sparkContext.parallelize(range(2), 2).map(
    lambda _: __import__("importlib.util").util.find_spec("fastapi") is None).collect()
spark.stop()
print(json.dumps({"present": absent, "rows": rows, "workers_without_fastapi": workers,
                  "pgfeed_spark": __import__("pgfeed_spark").__file__}))
"""


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"pgfeed serve exited: {proc.stderr.read().decode() if proc.stderr else ''}"
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"pgfeed serve did not answer on {url} within {timeout} s")


@pytest.mark.slow
@pytest.mark.pg
@pytest.mark.spark
def test_client_distribution_reads_a_feed_with_spark_without_the_server(
        wheels: Wheels, server_venv: Path, pg_clusters: Clusters, tmp_path: Path) -> None:
    """pip install pgfeed-spark into a fresh venv pulls neither FastAPI, uvicorn nor psycopg, and
    a Spark batch read works with it, against a real `pgfeed serve` (the server wheel's console
    script)."""
    env = _clean_env()
    venv = tmp_path / "client-venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path, env=env)
    vpy = venv / "bin" / "python"
    # a real resolution from the package index (pyspark from pip's cache): whatever
    # pgfeed-spark's and pgfeed-client's metadata ask for is installed, so the check below means
    # something (pgfeed-client comes from its wheel, named beside)
    _run(sys.executable, "-m", "pip", "--python", vpy, "install", "-q", wheels.spark, wheels.client,
         cwd=tmp_path, env=env)
    installed = _run(sys.executable, "-m", "pip", "--python", vpy, "list", "--format=freeze",
                     cwd=tmp_path, env=env).lower()
    for server_only in ("fastapi", "uvicorn", "psycopg", "starlette", "pydantic", "pgfeed=="):
        assert server_only not in installed, installed

    cluster = pg_clusters.newest()
    dsn = create_database(cluster, prefix="pkg")
    http_port, grpc_port = free_port(), free_port()
    url = f"http://127.0.0.1:{http_port}"
    server = subprocess.Popen(
        [server_venv / "bin" / "pgfeed", "serve", "--data-dir", tmp_path / "data",
         "--http-port", str(http_port), "--grpc-port", str(grpc_port)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_http(url, server)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE pkg (id int PRIMARY KEY, v text)")
        with FeedClient(url) as client:
            client.create_feed("pkg", dsn, tables=["public.pkg"], options={"heartbeat_seconds": 1})
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO pkg SELECT g, 'v' || g FROM generate_series(1, 500) g")
                conn.execute("UPDATE pkg SET v = 'u' WHERE id <= 10")
                target = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
            assert target is not None
            deadline = time.monotonic() + 60
            while parse_lsn(client.get_feed("pkg")["confirmed_lsn"]) < int(target[0]):
                assert time.monotonic() < deadline, "the feed did not capture the workload"
                time.sleep(0.2)
            neutral = tmp_path / "job"
            neutral.mkdir()
            spark_env = {**env, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": str(vpy),
                         "PYSPARK_DRIVER_PYTHON": str(vpy)}
            result = json.loads(_run(vpy, "-c", SPARK_READ, url, "pkg", cwd=neutral,
                                     env=spark_env).strip().splitlines()[-1])
            client.delete_feed("pkg")
    finally:
        server.terminate()
        server.wait(30)
        drop_slots(cluster, dsn)
    assert result["present"] == [], result["present"]
    assert result["workers_without_fastapi"] == [True, True]
    assert Path(result["pgfeed_spark"]).is_relative_to(venv), result["pgfeed_spark"]
    expected = ([[i, f"v{i}", "insert"] for i in range(1, 501)]
                + [[i, "u", "update"] for i in range(1, 11)])
    assert result["rows"] == sorted(expected)


def _stages(dockerfile: str) -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), one list per FROM stage."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    stages: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def test_image_final_stage_holds_the_wheel_only():
    """The defect this replaces: sources copied next to the installed package shadowed it."""
    stages = _stages((ROOT / "Dockerfile").read_text())
    assert len(stages) == 2, "a builder stage and a final stage"
    builder, final = stages
    assert any("pip wheel" in i for i in builder)
    copies = [i for i in final if i.upper().startswith(("COPY", "ADD"))]
    assert copies and all(i.startswith("COPY --from=") for i in copies), copies
    assert not any(re.search(r"\bgcc\b", i) for i in final), "no compiler in the image"
    assert final[-1].startswith("CMD") and '"pgfeed", "serve"' in final[-1]
    ignored = (ROOT / ".dockerignore").read_text().split()
    for pattern in (".git", ".venv", "build", "**/*.so", "tests", "bench"):
        assert pattern in ignored, pattern


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./scripts/test" in readme and "./scripts/demo" in readme
    assert "exec ./scripts/test" in ci


def test_no_symlink_in_the_tree() -> None:
    """Each package lives under its import name in its folder: nothing joins them by a link."""
    staged = _run("git", "ls-files", "-s", cwd=ROOT).splitlines()
    links = [line.split("\t", 1)[1] for line in staged if line.startswith("120000 ")]
    assert links == [], links


def _readme_install_command() -> list[str]:
    """The README's command that installs the three distributions from a checkout."""
    readme = (ROOT / "README.md").read_text()
    (line,) = [line for line in readme.splitlines() if line.startswith("pip install -e ./clients")]
    return line.split("#", 1)[0].split()


@pytest.mark.slow
def test_the_readme_install_command_works_from_a_clean_clone(tmp_path: Path) -> None:
    """A newcomer's ``pip install -e`` of what the README names, into a fresh venv, from a clean
    clone: pip resolves the server's pins on its clients from the folders named beside it."""
    command = _readme_install_command()
    assert command[:2] == ["pip", "install"] and {"./clients", "./spark_connector"} <= set(command)
    src, env = _clean_clone(tmp_path / "src"), _clean_env()
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path, env=env)
    vpy = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", vpy, *command[1:], "-q", cwd=src, env=env)
    neutral = tmp_path / "elsewhere"
    neutral.mkdir()
    where = json.loads(_run(vpy, "-c", "import json, pgfeed, pgfeed_client, pgfeed_spark, "
                            "pgfeed_proto.v1.feed_pb2 as p, pgfeed.encoding.transcode as t; "
                            "print(json.dumps([m.__file__ for m in (pgfeed, pgfeed_client, "
                            "pgfeed_spark, p)] + [t.IMPLEMENTATION]))", cwd=neutral, env=env))
    assert where[:4] == [str(src / "service/pgfeed/__init__.py"),
                         str(src / "clients/pgfeed_client/__init__.py"),
                         str(src / "spark_connector/pgfeed_spark/__init__.py"),
                         str(src / "clients/pgfeed_proto/v1/feed_pb2.py")], where
    assert where[4] == "c"  # the editable install compiled the transcoder in place
    assert "serve" in _run(venv / "bin" / "pgfeed", "--help", cwd=neutral, env=env)
