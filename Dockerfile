# The service image, built from source: `docker build -t sprint-supervisor .`
# (or `podman build`). The runtime stage holds only the static binary, CA
# certificates and a non-root user. To package an already-built static binary
# without a network inside the build, see deploy/Dockerfile.prebuilt and
# scripts/image.
FROM docker.io/library/rust:1.91-alpine3.22 AS build
RUN apk add --no-cache musl-dev=1.2.5-r10
WORKDIR /src
COPY . .
RUN cargo build --profile dist --locked --bin supervise \
    && mkdir -p /out/data \
    && cp target/dist/supervise /out/supervise

FROM docker.io/library/alpine:3.22 AS certs
RUN apk add --no-cache ca-certificates=20250619-r0

FROM scratch
COPY --from=certs /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY deploy/image/passwd /etc/passwd
COPY --from=build /out/supervise /supervise
COPY --from=build --chown=10001:10001 /out/data /data
USER 10001
ENV DATABASE_URL="sqlite:///data/supervise.db?mode=rwc" \
    SUPERVISE_LISTEN="0.0.0.0:3000"
VOLUME ["/data"]
EXPOSE 3000
HEALTHCHECK --interval=30s --timeout=5s CMD ["/supervise", "health"]
ENTRYPOINT ["/supervise"]
CMD ["serve"]
