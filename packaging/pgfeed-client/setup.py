"""Refuse to build an empty distribution: the packages here are symlinks (to ../../clients,
../../spark_connector, ../../protos/pgfeed), and a checkout without symlink support (git on
Windows without core.symlinks) turns them into small text files that setuptools would skip."""

from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
for package in ("pgfeed_client", "pgfeed_spark", "pgfeed_proto"):
    if not (HERE / package / "__init__.py").is_file():
        raise SystemExit(f"packaging/pgfeed-client/{package} is not a directory: clone with "
                         "symlinks enabled (git -c core.symlinks=true clone ...)")

setup()
