# pgfeed service image: `docker build -t pgfeed . && docker run -p 8000:8000 -p 50051:50051 -v pgfeed-data:/data pgfeed`
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PGFEED_DATA_DIR=/data

WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY service ./service
COPY clients ./clients
COPY protos ./protos
COPY spark_connector ./spark_connector
# gcc only for the build: the compiled transcoder (service/encoding/_transcode.c)
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null \
 && pip install . \
 && python -c "import service.encoding._transcode" \
 && apt-get purge -y -qq gcc libc6-dev >/dev/null && apt-get autoremove -y -qq >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /data pgfeed \
 && mkdir -p /data && chown pgfeed /data

USER pgfeed
VOLUME ["/data"]
EXPOSE 8000 50051
HEALTHCHECK --interval=15s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
CMD ["pgfeed", "serve", "--data-dir", "/data", "--http-host", "0.0.0.0", "--grpc-host", "0.0.0.0"]
