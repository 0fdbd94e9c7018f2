# ascendscope: build a wheel in one stage, run it as a non-root user in a slim one.
# Share a dashboard:  docker run -p 8000:8000 -v /path/to/profiles:/import:ro IMAGE serve --read-only /import
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY ingest ingest
COPY server server
COPY frontend frontend
COPY sample_data sample_data
COPY bench bench
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN groupadd --gid 10001 ascendscope \
    && useradd --create-home --uid 10001 --gid 10001 ascendscope \
    && mkdir /data \
    && chown ascendscope:ascendscope /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl \
    && rm -rf /wheels
USER 10001:10001
# The defaults of `ascendscope serve` inside the container: listen on all interfaces, keep runs in the
# volume, never try to open a browser. Arguments after the image name are passed to `ascendscope`.
ENV ASCENDSCOPE_HOST=0.0.0.0 \
    ASCENDSCOPE_DATA_DIR=/data \
    ASCENDSCOPE_NO_BROWSER=1
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/health', timeout=4)"]
ENTRYPOINT ["ascendscope"]
CMD ["serve"]
