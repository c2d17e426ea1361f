# fencing-proxy container image.
#
#   docker build -t fencing-proxy:0.1.0 \
#     --build-arg REVISION="$(git rev-parse --short=12 HEAD)" \
#     --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
#
# Two stages: `build` compiles on debian:bookworm and runs the unit tests; the final stage is
# debian:bookworm-slim with only the shared libraries the binary links against, running as a
# numeric non-root user. deploy/check-image proves this file without a Docker engine (it runs
# these RUN steps in debootstrap chroots); keep every step to FROM/ARG/ENV/WORKDIR/COPY/RUN/
# LABEL/USER/EXPOSE/STOPSIGNAL/ENTRYPOINT/CMD, one-line or backslash-continued, so it can.

############################################################################ build
FROM debian:bookworm AS build
ARG DEBIAN_FRONTEND=noninteractive

# The same packages as the `packages` list in scripts/install-deps.sh (deploy/validate checks
# that the two lists stay identical). Everything comes from Debian; nothing is downloaded at
# build time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake git ca-certificates pkg-config \
      libboost1.81-dev libboost-json1.81-dev libssl-dev \
      libyaml-cpp-dev prometheus-cpp-dev libcli11-dev libgoogle-perftools-dev \
      libzookeeper-mt-dev libnghttp2-dev \
      googletest libgtest-dev \
      python3 curl \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# The build context has no .git (see .dockerignore), so the revision comes in as a build arg.
ARG REVISION=unknown
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DFP_REVISION="${REVISION}" \
 && cmake --build /build -j"$(nproc)"

# Unit tests only: the integration tests start processes and take minutes; CI runs them.
RUN ctest --test-dir /build -E '^integration[.]' --output-on-failure --timeout 300 -j"$(nproc)"

RUN DESTDIR=/out cmake --install /build --prefix /usr/local --strip \
 && /out/usr/local/bin/fencing-proxy --version

############################################################################ runtime
FROM debian:bookworm-slim AS runtime
ARG DEBIAN_FRONTEND=noninteractive

# Runtime libraries only: the packages that own what `ldd fencing-proxy` lists beyond libc6,
# libstdc++6 and libgcc-s1 (already in the base). deploy/check-image recomputes this set from
# the built binary and fails if it drifts.
#   libboost_json.so.1.81.0        libboost-json1.81.0
#   libprometheus-cpp-core.so.1.0  libprometheus-cpp-core1.0
#   libyaml-cpp.so.0.7             libyaml-cpp0.7
#   libtcmalloc_minimal.so.4       libtcmalloc-minimal4
#   libzookeeper_mt.so.2           libzookeeper-mt2 (verified raises on ZooKeeper)
#   libssl.so.3, libcrypto.so.3    libssl3 (TLS: the listener, an https backend, etcd)
#   libnghttp2.so.14               libnghttp2-14 (HTTP/2: clients and an h2c backend)
# /var/lib/fencing-proxy is where the state file lives (a volume in production); it belongs to
# the runtime user so a fresh volume mounted there is writable. /etc/fencing-proxy holds the
# route file (a ConfigMap directory in Kubernetes); the image ships none on purpose: a proxy
# started with example routes would protect the wrong paths.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libboost-json1.81.0 libprometheus-cpp-core1.0 libyaml-cpp0.7 libtcmalloc-minimal4 \
      libzookeeper-mt2 libssl3 libnghttp2-14 \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/fencing-proxy \
 && install -d -m 0755 /etc/fencing-proxy

COPY --from=build /out/usr/local/bin/fencing-proxy /usr/local/bin/fencing-proxy

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=""
LABEL org.opencontainers.image.title="fencing-proxy" \
      org.opencontainers.image.description="HTTP/1.1 sidecar that refuses writes carrying a stale fencing token before they reach a legacy backend" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim"

# Numeric, so Kubernetes' runAsNonRoot can verify it without a passwd entry.
USER 65532:65532

# 8080: client traffic (`listen`). 9901: /metrics /healthz /readyz /fences (`admin_listen`; the
# route file must set it to 0.0.0.0:9901 for kubelet probes and Prometheus to reach it).
EXPOSE 8080 9901

# SIGTERM: /readyz turns 503, stop accepting, drain in-flight requests (timeouts.shutdown), exit 0.
STOPSIGNAL SIGTERM

# Exec form: the proxy is PID 1 and receives signals itself; no shell is needed at runtime.
ENTRYPOINT ["/usr/local/bin/fencing-proxy"]
CMD ["--config", "/etc/fencing-proxy/routes.yaml"]
