"""The server's packages and its optional compiled modules; everything else is in pyproject.toml.

The import name ``pgfeed`` is the folder service/ (``package_dir``); its subpackages are found
here so that a new one is never left out of the wheel. The compiled modules are the read path's
transcoder (service/encoding/_transcode.c) and the backfill row encoder
(service/backfill/_rows.c); without a C compiler the build skips them and pgfeed uses the
equivalent Python code. The clients are the pgfeed-client distribution (packaging/pgfeed-client).
"""

from setuptools import Extension, find_packages, setup

_FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers"]

setup(packages=["pgfeed", *(f"pgfeed.{name}" for name in find_packages("service"))],
      ext_modules=[Extension(name, [source], depends=depends, extra_compile_args=_FLAGS, optional=True)
                   for name, source, depends in (
                       ("pgfeed.encoding._transcode", "service/encoding/_transcode.c",
                        # _kinds.h: generated (service/types/kinds_header.py); _transcode_arrow.c:
                        # included (typed Arrow rows share the transcoder's text parsers)
                        ["service/encoding/_kinds.h", "service/encoding/_transcode_arrow.c"]),
                       ("pgfeed.backfill._rows", "service/backfill/_rows.c", []))])
