# pgfeed service image: `docker build -t pgfeed . && docker run -p 8000:8000 -p 50051:50051 -v pgfeed-data:/data pgfeed`
# Several replicas: `pgfeed serve --store postgresql://… --replica-id …` needs no /data (the store
# holds everything); deploy/compose.yaml runs three read-only replicas behind nginx.
# Two stages: the builder compiles the transcoder (service/pgfeed/encoding/_transcode.c) into a
# wheel; the final stage installs the wheels only (no sources to shadow the installed package, no
# compiler).

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
WORKDIR /src
COPY service ./service
COPY clients ./clients
# two wheels: pgfeed (the server, service/) and pgfeed-client (clients and gRPC stubs, clients/),
# which pgfeed pins; the extension is optional for a source install, here a wheel without it is an
# error
RUN pip wheel -q --no-deps -w /wheels ./service ./clients \
 && python -c "import glob, zipfile, sys; (w,) = glob.glob('/wheels/pgfeed-*.whl'); sys.exit(not any(n.startswith('pgfeed/encoding/_transcode') and n.endswith('.so') for n in zipfile.ZipFile(w).namelist()))"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PGFEED_DATA_DIR=/data
COPY --from=build /wheels /tmp/wheels
# the import check runs from / (no sources anywhere): the compiled transcoder must be the one in use
RUN pip install -q --find-links /tmp/wheels /tmp/wheels/pgfeed-*.whl \
 && rm -rf /tmp/wheels \
 && cd / && python -c "import pgfeed.encoding.transcode as t, pgfeed.encoding._transcode as c; assert t.IMPLEMENTATION == 'c', t.IMPLEMENTATION; print(c.__file__)" \
 && useradd --system --uid 10001 --home-dir /data pgfeed \
 && mkdir -p /data && chown pgfeed /data
WORKDIR /data
USER pgfeed
VOLUME ["/data"]
EXPOSE 8000 50051
HEALTHCHECK --interval=15s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
CMD ["pgfeed", "serve", "--data-dir", "/data", "--http-host", "0.0.0.0", "--grpc-host", "0.0.0.0"]
