"""The optional compiled transcoder (service/encoding/_transcode.c) and backfill row encoder
(service/backfill/_rows.c); everything else is in
pyproject.toml. Without a C compiler the build skips it and pgfeed uses the pure-Python encoders."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("service.encoding._transcode", ["service/encoding/_transcode.c"],
                             extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra",
                                                 "-Wno-unused-parameter",
                                                 "-Wno-missing-field-initializers"],
                             optional=True),
                   Extension("service.backfill._rows", ["service/backfill/_rows.c"],
                             extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra",
                                                 "-Wno-unused-parameter",
                                                 "-Wno-missing-field-initializers"],
                             optional=True)])
