# ascendscope: build the wheels in one stage, run them as a non-root user in a slim one.
#   docker build -t ascendscope .
#   docker run -p 8000:8000 -v ascendscope-data:/data ascendscope                       # upload runs in the browser
#   docker run -p 8000:8000 -v /path/to/profiles:/import:ro ascendscope serve --read-only /import   # share a set
#   docker run -p 8000:8000 -v /path/to/certs:/certs:ro -e ASCENDSCOPE_TLS_CERT=/certs/server.pem \
#       -e ASCENDSCOPE_TLS_KEY=/certs/server.key [-e ASCENDSCOPE_TLS_CLIENT_CA=/certs/ca.pem] ascendscope   # HTTPS
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY ingest ingest
COPY server server
COPY frontend frontend
COPY sample_data sample_data
COPY bench bench
COPY pyapi pyapi
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN groupadd --gid 10001 ascendscope \
    && useradd --create-home --uid 10001 --gid 10001 ascendscope \
    && mkdir /data \
    && chown ascendscope:ascendscope /data
COPY --from=build /wheels /wheels
# only the wheels built above: nothing is fetched at this step
RUN pip install --no-cache-dir --no-index --find-links=/wheels /wheels/ascendscope-*.whl \
    && rm -rf /wheels
USER 10001:10001
# The defaults of `ascendscope serve` inside the container: listen on all interfaces, keep runs in the volume,
# never try to open a browser; one server process per core the container gets (ASCENDSCOPE_WORKERS to change
# it). Flags given after the image name win (e.g. `serve --read-only --token T /import`);
# ASCENDSCOPE_TOKEN, ASCENDSCOPE_READ_ONLY and the other settings can be passed with -e.
ENV ASCENDSCOPE_HOST=0.0.0.0 \
    ASCENDSCOPE_DATA_DIR=/data \
    ASCENDSCOPE_NO_BROWSER=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
VOLUME /data
EXPOSE 8000
# /api/health answers without the access token, over HTTP or HTTPS (ASCENDSCOPE_TLS_CERT); under mutual TLS, which
# the check cannot pass without a client certificate, it checks that the server takes up a TLS handshake
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "ascendscope.server.healthcheck"]
ENTRYPOINT ["ascendscope"]
CMD ["serve"]
