# pgfeed service image: `docker build -t pgfeed . && docker run -p 8000:8000 -p 50051:50051 -v pgfeed-data:/data pgfeed`
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PGFEED_DATA_DIR=/data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY service ./service
COPY clients ./clients
COPY protos ./protos
COPY spark_connector ./spark_connector
RUN pip install . \
 && useradd --system --uid 10001 --home-dir /data pgfeed \
 && mkdir -p /data && chown pgfeed /data

USER pgfeed
VOLUME ["/data"]
EXPOSE 8000 50051
HEALTHCHECK --interval=15s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
CMD ["pgfeed", "serve", "--data-dir", "/data", "--http-host", "0.0.0.0", "--grpc-host", "0.0.0.0"]
