#!/usr/bin/env bash
# Builds the Dockerfile for real where a Docker engine runs but no registry
# or module proxy is reachable (docs/deploy.md, "Building the image"):
#   - the builder base is imported locally: dash and libc from this machine
#     plus this machine's Go, as prebake-local/go-builder;
#   - the runtime base is scratch;
#   - the modules come from a vendor/ directory made in a temporary copy of
#     the working tree (from the local module cache, GOPROXY=off), with
#     --build-arg MOD_DOWNLOAD=false.
# Then it runs the image's `prebake version`. Usage: deploy/build-image-local.sh [tag]
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-prebake:local}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

goroot=$(go env GOROOT)
root=$work/rootfs
mkdir -p "$root"/{bin,tmp,root,src,usr/local}
cp /bin/dash "$root/bin/sh"
for lib in $(ldd /bin/dash | grep -o '/[^ ]*'); do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
cp -a "$goroot" "$root/usr/local/go"
chmod 1777 "$root/tmp"
tar -C "$root" -c . | docker import \
	--change 'ENV PATH=/usr/local/go/bin:/bin' \
	--change 'ENV HOME=/root GOCACHE=/tmp/gocache GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=vendor' \
	- prebake-local/go-builder >/dev/null

ctx=$work/context
mkdir -p "$ctx"
# The working tree as it is, without what .dockerignore would drop anyway.
tar -c --exclude=./.git --exclude=./bin --exclude=./e2e/out -f - . | tar -C "$ctx" -x
(cd "$ctx" && GOFLAGS=-mod=mod GOPROXY=off go mod vendor)

docker build -q -t "$tag" \
	--build-arg GO_IMAGE=prebake-local/go-builder \
	--build-arg RUNTIME_IMAGE=scratch \
	--build-arg MOD_DOWNLOAD=false \
	--build-arg VERSION="$(git describe --tags --always --dirty 2>/dev/null || echo dev)" \
	--build-arg COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
	"$ctx"
docker run --rm "$tag" version
docker image inspect -f 'user={{.Config.User}} entrypoint={{.Config.Entrypoint}}' "$tag"
