# The broker as a container image: a release build in a Rust image, run as a non-root user
# from a slim Debian image.
#
#   docker build -t sluice .
#   docker run -p 7878:7878 -v sluice-data:/var/lib/sluice \
#       -v "$PWD/sluice.toml:/etc/sluice/sluice.toml:ro" sluice
#
# The container listens on 0.0.0.0:7878, which the broker refuses without API keys, and
# refuses keys without TLS: mount a config file at /etc/sluice/sluice.toml with [[keys]]
# (`sluice key generate`) and either `tls_cert`/`tls_key` (mount them too) or
# `allow_plaintext = true` when a TLS-terminating proxy or mesh sits in front. Messages live
# in the /var/lib/sluice volume; for several nodes set `store` to a postgres:// URL instead.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p sluice \
    && install -m 0755 target/release/sluice /usr/local/bin/sluice

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/sluice --shell /usr/sbin/nologin sluice \
    && install -d -o sluice -g sluice -m 0700 /var/lib/sluice \
    && install -d -m 0755 /etc/sluice
COPY --from=build /usr/local/bin/sluice /usr/local/bin/sluice
USER sluice
VOLUME ["/var/lib/sluice"]
ENV SLUICE_LISTEN=0.0.0.0:7878 \
    SLUICE_DATA_DIR=/var/lib/sluice \
    SLUICE_CONFIG=/etc/sluice/sluice.toml
EXPOSE 7878
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD curl -fsSk -o /dev/null https://127.0.0.1:7878/healthz \
        || curl -fsS -o /dev/null http://127.0.0.1:7878/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve"]
