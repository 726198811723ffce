# syntax=docker/dockerfile:1
# The gate as a static binary on a distroless base, run as a non-root user, for
# linux/amd64 and linux/arm64 from one call (make image):
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) -t capture-gate .
#   docker run --rm capture-gate version   # version, commit, Go and franz-go
#   docker run --rm capture-gate env       # the GATE_* variables
# The build stage runs on the builder's own platform (BUILDPLATFORM) and cross-compiles
# for the target's (TARGETOS/TARGETARCH): pure Go, CGO off, so no emulation is needed.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags="-s -w -X github.com/capturegate/gate/internal/buildinfo.Version=${VERSION} -X github.com/capturegate/gate/internal/buildinfo.Commit=${COMMIT}" \
      -o /out/gate ./cmd/gate

# static: no libc, no shell; nonroot: uid 65532.
FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="capture gate" \
      org.opencontainers.image.description="Kafka consumer-group worker that rate-limits per team and routes records to accepted, overflow and dead-letter topics" \
      org.opencontainers.image.source="https://github.com/capturegate/gate" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/gate /usr/local/bin/gate
# Numeric, so that Kubernetes can check runAsNonRoot without a runAsUser (which OpenShift's
# restricted SCC assigns from the namespace's range): 65532 is distroless' nonroot.
USER 65532:65532
# /metrics, /healthz, /readyz (GATE_HTTP_ADDR, default :8080)
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gate"]
CMD ["serve"]
