"""Guideline 9: the public surface of clients/ and spark_connector/ is exactly their ``__all__``."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest


@pytest.mark.parametrize("package", ["pgfeed_client", "pgfeed_spark"])
def test_exported_names_equal_all(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:  # every exported name resolves (lazy ones included)
        assert getattr(module, name) is not None, name
    public = {name for name in dir(module)
              if not name.startswith("_") and not isinstance(getattr(module, name), types.ModuleType)
              and name != "annotations"}
    assert public == set(module.__all__)
    assert len(module.__all__) == len(set(module.__all__))


def test_clients_import_neither_service_nor_grpc_eagerly() -> None:
    """Executors install only pgfeed-client and pgfeed-spark: no import of the server
    (``pgfeed``) anywhere, and the gRPC stubs load only when a gRPC client is asked for."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    for package in ("clients/pgfeed_client", "spark_connector/pgfeed_spark"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                else:
                    continue
                assert not any(n == "pgfeed" or n.startswith("pgfeed.") for n in names), path
    code = ("import sys, pgfeed_client, pgfeed_spark; print(sorted({m.split('.')[0] for m in "
            "sys.modules} & {'grpc', 'pgfeed', 'pgfeed_proto'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_a_grpc_client_without_the_grpc_extra_says_how_to_install_it() -> None:
    """Without grpcio (blocked in a fresh interpreter) the HTTP client still imports, and asking
    for a gRPC client names the extra to install, not a bare "No module named 'grpc'"."""
    code = ("import sys; sys.modules['grpc'] = None\n"
            "import pgfeed_client\n"
            "assert pgfeed_client.FeedClient\n"
            "try:\n    pgfeed_client.GrpcFeedClient\n"
            "except ModuleNotFoundError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("GrpcFeedClient needs the gRPC extra (grpcio, protobuf): pip "
                                  "install 'pgfeed-client[grpc]' (missing module: grpc)")
