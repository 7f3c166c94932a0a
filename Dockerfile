# karpy: Karpenter in Python. `docker build -t ghcr.io/karpy/karpy:0.1.0 .`
# Runs `karpy controller` by default (deploy/deployment.yaml passes its flags);
# any other karpy command works too: `docker run --rm IMAGE simulate /examples/...`.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY karpy ./karpy
RUN pip install ".[aws]" && rm -rf /src

# the same uid/gid as upstream's chart runs the controller with (runAsUser: 65536)
RUN groupadd --system --gid 65536 karpy \
    && useradd --system --uid 65536 --gid 65536 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin karpy
COPY examples /examples
WORKDIR /
USER 65536:65536

# metrics, health probes
EXPOSE 8080 8081
ENTRYPOINT ["karpy"]
CMD ["controller"]
