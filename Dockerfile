# The trio-ccm image: Python 3.12 slim, a virtualenv with trio-ccm and its runtime
# dependencies only, running as UID/GID 65532 with `trio-ccm` as its entrypoint.
#
#   docker build -t REGISTRY/trio-ccm:0.1.0 .
#
# Reproducible build (same inputs, same image digest): pin the base image by digest (below),
# pass the last commit's time, and let BuildKit clamp the files' times to it:
#
#   docker buildx build --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) \
#     --output type=image,name=REGISTRY/trio-ccm:0.1.0,rewrite-timestamp=true .
#
# What is pinned: the base image (by tag; by digest once resolved), every runtime
# dependency (exact version and sha256 of each file, deploy/requirements.lock), the build
# backend (exact version and sha256, below). Only wheels are installed: nothing is compiled.

# Pinned by tag. A tag can be moved to another image, a digest cannot: resolve it with
#   docker buildx imagetools inspect python:3.12.12-slim-trixie
# and use python:3.12.12-slim-trixie@sha256:<that digest> here (and bump both together).
# (This file was written where no container registry could be reached to resolve it.)
ARG PYTHON_IMAGE=python:3.12.12-slim-trixie

FROM ${PYTHON_IMAGE} AS builder
# SOURCE_DATE_EPOCH fixes the timestamps inside the wheel (setuptools) and makes the .pyc
# files hash-based rather than mtime-based (py_compile), so both are byte-for-byte
# repeatable. Default: 1980-01-01, the earliest time a wheel (a zip file) can record.
ARG SOURCE_DATE_EPOCH=315532800
ENV SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH} \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src

# The runtime virtualenv, without pip (the image needs none), filled by the base image's
# pip. Dependencies first: this layer changes only with the lock file.
COPY deploy/requirements.lock deploy/requirements.lock
RUN python -m venv --without-pip /opt/trio-ccm \
 && python -m pip --python /opt/trio-ccm/bin/python install \
        --require-hashes --only-binary=:all: --no-deps -r deploy/requirements.lock

# The build backend (pyproject.toml's build-system), pinned with hashes as well, in a
# virtualenv of its own so none of it reaches the image.
RUN printf '%s\n' \
        'setuptools==84.2.1 --hash=sha256:3ff8b3b5492a0aa66960f4419365a86b84e013070d4313e4d4a6894f5d64d6bc --hash=sha256:ca140b45d5325a9478f880e351484f62fef15f336462e449ca0c03c873d589c2' \
        'wheel==0.48.0 --hash=sha256:3217dcc807155e45db462d7ef2431f5ddda0d7273b700d05a67b271ceb1287ab --hash=sha256:94800765601e9171bf5d58d066e640662842bcedcbab982b2c90787a2c987322' \
        'packaging==26.3 --hash=sha256:94edc256424af38762eb31306eed28beb9f0efc50a8837492c9d6fd6004aed79 --hash=sha256:d7193f7c8e4e93f444fde0262bf90af30e16fa0ad0ad44cb553c87339b23cd1c' \
        > /tmp/build-requirements.txt \
 && python -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes --only-binary=:all: --no-deps \
        -r /tmp/build-requirements.txt

# trio-ccm itself: a wheel, installed without dependencies (they are all in the lock, and
# the `test` extra is never asked for); `pip check` fails the build if the lock misses one.
COPY pyproject.toml README.md ./
COPY src src
RUN /opt/build/bin/pip wheel --no-build-isolation --no-deps --wheel-dir /wheels . \
 && python -m pip --python /opt/trio-ccm/bin/python install --no-deps --no-index \
        /wheels/trio_ccm-*.whl \
 && python -m pip --python /opt/trio-ccm/bin/python check \
 && /opt/trio-ccm/bin/trio-ccm --version \
 && ln -s /opt/trio-ccm/bin/trio-ccm /usr/local/bin/cloud-controller-manager


FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="trio-ccm" \
      org.opencontainers.image.description="A Kubernetes cloud-controller-manager on Trio" \
      org.opencontainers.image.licenses="Apache-2.0"
# The same base image, so the virtualenv's interpreter link (/usr/local/bin/python) holds.
COPY --from=builder /opt/trio-ccm /opt/trio-ccm
# No .pyc written at run time (the root filesystem is read-only in deploy/; the installed
# modules were compiled at build time); log lines leave at once.
ENV PATH=/opt/trio-ccm/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root, by number (no passwd entry needed; runAsNonRoot can check a number, not a name).
# Manifests written for the Go CCM may set `command: [/usr/local/bin/cloud-controller-manager]`
# (the Kubernetes docs' example does); that path runs trio-ccm too (made in the builder).
COPY --from=builder /usr/local/bin/cloud-controller-manager /usr/local/bin/cloud-controller-manager
USER 65532:65532
# The Go CCM's secure port: /healthz, /readyz, /livez, /metrics, /configz.
EXPOSE 10258
ENTRYPOINT ["trio-ccm"]
