# Image of `prebake serve`. Build: docker build -t prebake:dev .
# (Needs the golang and distroless base images from a registry; the e2e
# suite's default backend does not use this image.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/prebake-dev/prebake/internal/version.Version=${VERSION}" \
    -o /out/prebake ./cmd/prebake

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/prebake /prebake
USER 65532:65532
EXPOSE 8086 8087
ENTRYPOINT ["/prebake"]
CMD ["serve", "--config", "/etc/prebake/config.yaml", "--listen", ":8086", "--http-listen", ":8087", \
     "--tls-cert", "/etc/prebake/tls/tls.crt", "--tls-key", "/etc/prebake/tls/tls.key", "--client-ca", "/etc/prebake/tls/ca.crt"]
