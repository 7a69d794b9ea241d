# syncd container image: a static binary on distroless, running as a non-root user.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t syncd .
#   (or `make docker`; both need a Docker engine or another BuildKit builder)
#
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 .
# The builder stage runs on the build host's platform and cross-compiles.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
# Static (no cgo, so no libc), reproducible paths (-trimpath), the zoneinfo
# database compiled in (timetzdata) so that CRON_TZ= schedules work on any base
# image, and the version stamped in for `syncd version`.
# deploy/deploy_test.go runs this exact command, so keep it on one RUN line.
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -tags timetzdata -ldflags "-s -w -X github.com/syncd/syncd/cli.Version=${VERSION}" -o /out/syncd ./cmd/syncd
# The state folder, created here because the runtime image has no shell.
RUN mkdir -p /out/state

# distroless/static: CA certificates (for sslmode=verify-full), /etc/passwd
# with a nonroot user, no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/syncd /syncd
COPY --from=build --chown=65532:65532 /out/state /var/lib/syncd
# Numeric, so that Kubernetes' runAsNonRoot can verify it without a runAsUser.
USER 65532:65532
# The bbolt state file lives here; mount a volume so that the watermarks
# survive the container (one writer per file: bbolt holds a file lock).
VOLUME ["/var/lib/syncd"]
WORKDIR /var/lib/syncd
EXPOSE 7391
ENTRYPOINT ["/syncd"]
# Inside a container the listener binds to all interfaces: loopback is the
# container's own, so Kubernetes probes (sent by the kubelet to the pod IP) and
# Prometheus could not reach /healthz, /readyz and /metrics on 127.0.0.1.
# Outside a container keep the default (127.0.0.1:7391).
CMD ["run", "--config", "/etc/syncd", "--state", "/var/lib/syncd/syncd.db", "--listen", "0.0.0.0:7391"]
