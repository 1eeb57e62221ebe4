# Image of `prebake serve`: a static binary on a distroless, shell-less,
# non-root base. deploy/ runs it; deploy/dockerfile_test.go checks this file.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse --short HEAD) -t prebake:dev .
#
# Both base images are build args, so a build without registry access can
# pass local ones (docs/deploy.md, "Building the image"):
#   --build-arg GO_IMAGE=local/go-builder --build-arg RUNTIME_IMAGE=scratch
# Without the module proxy, build from a context holding a vendor/ directory
# (go build then uses it) and pass --build-arg MOD_DOWNLOAD=false.
ARG GO_IMAGE=golang:1.26
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
ARG MOD_DOWNLOAD=true
COPY go.mod go.sum ./
RUN if [ "$MOD_DOWNLOAD" = true ]; then go mod download; fi
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
# The same flags as the Makefile's LDFLAGS.
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/prebake-dev/prebake/internal/version.Version=${VERSION} -X github.com/prebake-dev/prebake/internal/version.Commit=${COMMIT}" \
    -o /out/prebake ./cmd/prebake

# No RUN below this line: the runtime image has no shell.
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/prebake /prebake
# distroless "nonroot"; numeric, so the kubelet can check runAsNonRoot.
USER 65532:65532
EXPOSE 8086 8087
ENTRYPOINT ["/prebake"]
# deploy/base/prebake.yaml passes its own args; these are the same paths.
CMD ["serve", "--config", "/etc/prebake/config/config.yaml", "--listen", ":8086", "--http-listen", ":8087", \
     "--tls-cert", "/etc/prebake/tls/tls.crt", "--tls-key", "/etc/prebake/tls/tls.key", "--client-ca", "/etc/prebake/tls/ca.crt"]
