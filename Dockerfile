# leasehold: multi-stage build, non-root runtime, data on a volume.
# It serves on 0.0.0.0, so it requires TLS and a policy, mounted read-only
# at /etc/leasehold (deploy/certs.sh makes the certificates; README,
# "Container"):
#   docker build -t leasehold .
#   docker run -p 50051:50051 -p 9464:9464 -v leasehold-data:/data \
#     -v "$PWD/leasehold-etc:/etc/leasehold:ro" leasehold
FROM rust:1-bookworm AS build
WORKDIR /src
# Every path the build reads: the workspace's members, the protos and
# tests/ (the manifest names tests/torture.rs). scripts/dockerfile-check
# replays these lines.
COPY Cargo.toml Cargo.lock ./
COPY crates crates
COPY bench bench
COPY proto proto
COPY src src
COPY examples examples
COPY tests tests
RUN cargo build --release --locked --bin leasehold

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /data leasehold \
 && mkdir -p /data && chown leasehold /data
COPY --from=build /src/target/release/leasehold /usr/local/bin/leasehold
USER leasehold
VOLUME ["/data"]
EXPOSE 50051 9464
ENV LEASEHOLD_LISTEN=0.0.0.0:50051 \
    LEASEHOLD_ADMIN_LISTEN=0.0.0.0:9464 \
    LEASEHOLD_DATA_DIR=/data \
    LEASEHOLD_TLS_CERT=/etc/leasehold/server.pem \
    LEASEHOLD_TLS_KEY=/etc/leasehold/server-key.pem \
    LEASEHOLD_TLS_CLIENT_CA=/etc/leasehold/ca.pem \
    LEASEHOLD_POLICY=/etc/leasehold/policy.toml
# Health through the admin port (/healthz over TLS), by the binary itself:
# the slim image has no curl. `leasehold health` reads the same variables
# as `serve`. The start period covers a restart on a large data dir (every
# start checks the whole store before it listens).
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["leasehold", "health"]
# SIGTERM (docker stop) drains in-flight calls and syncs the store; give it
# more than --drain-timeout (10 s): docker stop -t 30.
STOPSIGNAL SIGTERM
ENTRYPOINT ["leasehold"]
CMD ["serve"]
