# syntax=docker/dockerfile:1
# karpy: Karpenter in Python, as a container image (BuildKit: Docker 23 or later, podman or buildah).
#   docker build --build-arg KARPY_COMMIT=$(git rev-parse --short HEAD) -t REGISTRY/karpy:0.1.0 .
# Runs `karpy controller` by default (the chart and deploy/deployment.yaml pass its flags); any other karpy
# command works too: `docker run --rm IMAGE simulate /examples/...`; `docker run --rm IMAGE --version` prints
# `karpy 0.1.0 (commit abc1234)`. Every Python package it installs is pinned by constraints.txt
# (scripts/gen_constraints.py writes it from pyproject.toml's pins). The base image is pinned by its full version;
# pin its digest too with --build-arg PYTHON_IMAGE=python:3.12.11-slim-bookworm@sha256:...
ARG PYTHON_IMAGE=python:3.12.11-slim-bookworm

# --- build: karpy's wheel, stamped with the commit it is built from
FROM ${PYTHON_IMAGE} AS build
ARG KARPY_COMMIT=""
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY constraints.txt pyproject.toml README.md ./
COPY karpy ./karpy
RUN python -c 'import sys; open("karpy/_build.py", "w").write(f"COMMIT = {sys.argv[1]!r}\n")' "$KARPY_COMMIT"
RUN pip install --constraint constraints.txt setuptools
RUN pip wheel --no-build-isolation --no-deps --wheel-dir /wheels .

# --- runtime: the wheel and its pinned dependencies (binary wheels only), nothing of the build
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    --mount=type=bind,source=constraints.txt,target=/tmp/constraints.txt \
    pip install --only-binary=:all: --constraint /tmp/constraints.txt "$(ls /wheels/karpy-*.whl)[aws]"

# the same uid/gid as upstream's chart runs the controller with (runAsUser: 65536); the program stays root's
RUN groupadd --system --gid 65536 karpy \
    && useradd --system --uid 65536 --gid 65536 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin karpy
COPY examples /examples
WORKDIR /
USER 65536:65536

# metrics, health probes
EXPOSE 8080 8081
ENTRYPOINT ["karpy"]
CMD ["controller"]
