"""The committed generated code (clients/pgfeed_proto/v1/*_pb2*.py) matches protos/pgfeed/v1/feed.proto: regenerated into
a temporary directory with protos/build.py, it must be byte-identical."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTOS = ROOT / "protos"
COMMITTED = ROOT / "clients" / "pgfeed_proto" / "v1"


def _build_module():  # protos/ is not a package: load its build script by path
    spec = importlib.util.spec_from_file_location("pgfeed_proto_build", PROTOS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    build = _build_module()
    fresh = build.build(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in fresh] == [
        f"pgfeed_proto/v1/{name}" for name in build.GENERATED]
    stale = [path.name for path in fresh if path.read_bytes() != (COMMITTED / path.name).read_bytes()]
    assert not stale, (f"{', '.join(stale)} differ from what {', '.join(build.SOURCES)} generates: "
                       "run `.venv/bin/python protos/build.py` and commit the result")
