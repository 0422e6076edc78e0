"""The committed generated code (protos/pgfeed/v1/*_pb2*.py) matches feed.proto: regenerated into
a temporary directory with protos/build.py, it must be byte-identical."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTOS = ROOT / "protos"


def _build_module():  # protos/ is not a package: load its build script by path
    spec = importlib.util.spec_from_file_location("pgfeed_proto_build", PROTOS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    build = _build_module()
    fresh = build.build(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in fresh] == list(build.GENERATED)
    stale = [name for name in build.GENERATED
             if (tmp_path / name).read_bytes() != (PROTOS / name).read_bytes()]
    assert not stale, (f"{', '.join(stale)} differ from what {', '.join(build.SOURCES)} generates: "
                       "run `.venv/bin/python protos/build.py` and commit the result")
