# Prometheus for the compose test, where the compose file's prom/prometheus image cannot be pulled:
# Debian's package on the test's base image, started as prom/prometheus starts (the entry point is
# the server; the compose file's command gives its flags). Its default storage is Debian's
# /var/lib/prometheus, which the package's user owns. wget is there for the compose file's health
# check, as busybox's is in prom/prometheus.
ARG BASE
FROM ${BASE}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus wget \
    && rm -rf /var/lib/apt/lists/*
USER prometheus
WORKDIR /var/lib/prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml"]
