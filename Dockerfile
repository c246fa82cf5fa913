# quintet in a container: `docker build -t quintet .` (docs/operations.md#docker).
# Build stage: the release binary with every engine adapter (PostgreSQL, Redis, S3),
# without debug information (two thirds of the binary, most of it the standard library's;
# a panic still names its file and line, a backtrace its functions).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p quintet --features scale-out \
      --config 'profile.release.strip="debuginfo"' \
 && install -D -m 0755 target/release/quintet /out/quintet

# Final stage: the binary, CA certificates (S3 and queue workers over https), a user.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/quintet --shell /usr/sbin/nologin quintet \
 && install -d -o quintet -g quintet -m 0700 /var/lib/quintet /etc/quintet
COPY --from=build /out/quintet /usr/local/bin/quintet
USER quintet
# Data in one volume, the master key in another (keep it apart from the data and backups).
VOLUME ["/var/lib/quintet", "/etc/quintet"]
# A container is reached from outside its loopback, so it listens on every address and
# the domain form needs tokens: pass QUINTET_JWT_SECRET (32 bytes or more), or set
# QUINTET_AUTH=none with QUINTET_INSECURE_NO_AUTH=true behind a proxy that authenticates.
ENV QUINTET_LISTEN=0.0.0.0:6363 \
    QUINTET_DATA_DIR=/var/lib/quintet \
    QUINTET_MASTER_KEY_FILE=/etc/quintet/master.key \
    QUINTET_AUTH=jwt \
    QUINTET_LOG_FORMAT=json
EXPOSE 6363
STOPSIGNAL SIGTERM
ENTRYPOINT ["quintet"]
CMD ["serve"]
