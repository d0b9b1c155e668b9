# syntax=docker/dockerfile:1
#
# pyepp endpoint picker image.
#
#   docker build -t pyepp:dev .
#   docker build --build-arg EPP_EXTRAS=tokenizer -t pyepp:dev-tokenizer .   # + the in-process tokenizer
#   docker run --rm --read-only --tmpfs /tmp -p 9002:9002 -p 9003:9003 -p 9090:9090 \
#       pyepp:dev --endpoints 10.0.0.1:8000,10.0.0.2:8000
#
# Stage 1 builds the project wheel and collects a wheel for every dependency; stage 2 installs them
# into a virtualenv with --no-index, so the final image holds no compiler, no pip cache and no source.
# The image runs as UID 65532 and writes nothing outside /tmp: TLS certificates are generated in memory
# (or read from --cert-path), byte code is compiled at install time, so `--read-only` with a tmpfs (an
# emptyDir in Kubernetes) on /tmp works. EPP_EXTRAS names pyproject extras to install with the picker
# (comma-separated): `tokenizer` for precise-prefix-cache-* with indexerConfig.tokenizersPoolConfig
# (about 35 MB more); empty by default.
# tests/deploy/test_image_install.py runs these RUN steps outside Docker and checks the result.

ARG PYTHON_VERSION=3.12
ARG EPP_EXTRAS=""

FROM python:${PYTHON_VERSION}-slim AS build
ARG EPP_EXTRAS
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY scheduler/ scheduler/
COPY datalayer/ datalayer/
COPY epp/ epp/
COPY simulator/ simulator/
COPY bench/ bench/
RUN python -m pip wheel --wheel-dir /wheels ".${EPP_EXTRAS:+[$EPP_EXTRAS]}"

FROM python:${PYTHON_VERSION}-slim
ARG EPP_EXTRAS
LABEL org.opencontainers.image.title="pyepp" \
      org.opencontainers.image.description="Endpoint picker for LLM inference behind Envoy ext_proc (GIE-compatible)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/epp \
    PATH=/opt/epp/bin:$PATH \
    HOME=/tmp \
    TMPDIR=/tmp \
    EPP_GRPC_HEALTH_PORT=9003
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/epp \
    && /opt/epp/bin/python -m pip install --no-index --find-links /wheels "pyepp${EPP_EXTRAS:+[$EPP_EXTRAS]}"
# Build information, reported by the inference_extension_info{commit,build_ref} metric. Declared after
# the install so that a new commit does not invalidate the cached install layer.
ARG EPP_COMMIT=unknown
ARG EPP_BUILD_REF=dev
LABEL org.opencontainers.image.revision="${EPP_COMMIT}" \
      org.opencontainers.image.version="${EPP_BUILD_REF}"
ENV EPP_COMMIT=${EPP_COMMIT} \
    EPP_BUILD_REF=${EPP_BUILD_REF}
USER 65532:65532
WORKDIR /tmp
EXPOSE 9002 9003 9090
# A gRPC health probe (grpc.health.v1, service "") on the health port; Kubernetes ignores HEALTHCHECK
# and uses the chart's grpc probes instead. Set EPP_GRPC_HEALTH_PORT when --grpc-health-port is changed.
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, sys, grpc; from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g; ch = grpc.insecure_channel('127.0.0.1:' + os.environ.get('EPP_GRPC_HEALTH_PORT', '9003')); r = g.HealthStub(ch).Check(h.HealthCheckRequest(service=''), timeout=3); sys.exit(0 if r.status == h.HealthCheckResponse.SERVING else 1)"]
ENTRYPOINT ["epp"]
