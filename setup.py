"""The optional compiled modules: the read path's transcoder (service/encoding/_transcode.c) and
the backfill row encoder (service/backfill/_rows.c); everything else is in pyproject.toml.
Without a C compiler the build skips them and pgfeed uses the equivalent Python code."""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers"]

# _transcode.c includes _transcode_arrow.c (typed Arrow rows share its text parsers)
_DEPENDS = {"service/encoding/_transcode.c": ["service/encoding/_transcode_arrow.c"]}

setup(ext_modules=[Extension(name, [source], extra_compile_args=_FLAGS, optional=True,
                             depends=_DEPENDS.get(source, []))
                   for name, source in (("service.encoding._transcode", "service/encoding/_transcode.c"),
                                        ("service.backfill._rows", "service/backfill/_rows.c"))])
