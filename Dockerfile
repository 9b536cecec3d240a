# The coded image: `coded master`, `coded worker`, `coded submit`, ... as the entry point.
# BASE lets a test build from a locally made base image when no registry can be reached.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY protos protos
COPY coded coded
COPY common common
COPY master master
COPY worker worker
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${BASE}
RUN useradd --create-home --uid 10001 coded \
    && mkdir -p /home/coded/state /home/coded/certs /home/coded/ca && chown -R 10001:10001 /home/coded
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001:10001
WORKDIR /home/coded
ENV PYTHONUNBUFFERED=1
EXPOSE 50051 50052 9100
# plaintext servers; a TLS deployment overrides it with the TLS options (docker-compose.yml does)
HEALTHCHECK --interval=10s --timeout=5s --retries=3 CMD ["coded", "health", "--address", "127.0.0.1:50051"]
ENTRYPOINT ["coded"]
CMD ["--help"]
