"""The server's packages and its optional compiled modules; everything else is in pyproject.toml.

The package ``pgfeed`` and every subpackage are found here, so a new one is never left out of the
wheel. The compiled modules are the read path's transcoder (pgfeed/encoding/_transcode.c), the
frame walk's run step (pgfeed/assembler/_framing.c), the backfill row encoder
(pgfeed/backfill/_rows.c) and the replication stream's receive loop
(pgfeed/replication/_receive.c); without a C compiler the build skips them and
pgfeed uses the equivalent Python code.
"""

from setuptools import Extension, find_packages, setup

_FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers"]

setup(packages=find_packages(include=["pgfeed", "pgfeed.*"]),
      ext_modules=[Extension(name, [source], depends=depends, extra_compile_args=_FLAGS, optional=True)
                   for name, source, depends in (
                       ("pgfeed.encoding._transcode", "pgfeed/encoding/_transcode.c",
                        # the headers: generated (python -m pgfeed.encoding.tables);
                        # _transcode_arrow.c: included (typed Arrow rows share the transcoder's
                        # text parsers)
                        ["pgfeed/encoding/_kinds.h", "pgfeed/encoding/_proto_tags.h",
                         "pgfeed/encoding/_arrow_abi.h", "pgfeed/encoding/_transcode_arrow.c"]),
                       ("pgfeed.assembler._framing", "pgfeed/assembler/_framing.c", []),
                       ("pgfeed.backfill._rows", "pgfeed/backfill/_rows.c", []),
                       ("pgfeed.replication._receive", "pgfeed/replication/_receive.c", []))])
