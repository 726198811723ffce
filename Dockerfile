# syntax=docker/dockerfile:1
# The gate as a static binary on a distroless base, run as a non-root user.
#   docker build -t capture-gate .
#   docker run --rm capture-gate env        # the GATE_* variables
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gate ./cmd/gate

# static: no libc, no shell; nonroot: uid 65532.
FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/gate /usr/local/bin/gate
USER nonroot:nonroot
# /metrics, /healthz, /readyz (GATE_HTTP_ADDR, default :8080)
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gate"]
CMD ["serve"]
