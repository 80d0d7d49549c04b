# ovstream in a container: a static binary on a distroless base, as a
# non-root user. Build: docker build -t ovstream .
# Run:   docker run --env-file ovstream.env -p 9464:9464 ovstream
#        (ovstream.env: DATABASE_URL, KAFKA_BROKERS, OVSTREAM_PIPELINE,
#        KAFKA_SASL_PASSWORD; see deploy/systemd/ovstream.service)
# Other commands: docker run --rm --env-file ovstream.env ovstream migrate up (or status, dlq ...).
# Exit 3 means fenced (another instance owns the partitions now): a restart
# policy of on-failure restarts it as a standby; see the README.

# build compiles a static binary (no cgo) from the module.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ovstream ./cmd/ovstream

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ovstream /usr/local/bin/ovstream
USER nonroot:nonroot
# /metrics, /healthz and /readyz
EXPOSE 9464
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/ovstream", "healthcheck", "--url", "http://127.0.0.1:9464/healthz"]
ENTRYPOINT ["/usr/local/bin/ovstream"]
CMD ["run", "--metrics-addr", "0.0.0.0:9464", "--log-format", "json"]
