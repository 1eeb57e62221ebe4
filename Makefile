# prebake — see README.md. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/prebake-dev/prebake/internal/version.Version=$(VERSION) -X github.com/prebake-dev/prebake/internal/version.Commit=$(COMMIT)
# Packages of the fast loop: everything but the e2e suite (build tag e2e).
UNIT_TIMEOUT ?= 5m
E2E_TIMEOUT ?= 50m

.PHONY: all build unit vet test system e2e demo demo-docker bench bench-hcloud bench-gce bench-mesh ciliumcompat generate check-generate fuzz clean help

all: build

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

build: ## build bin/prebake
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o bin/prebake ./cmd/prebake

vet: ## go vet
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/... ./deploy/... ./bootstrap/... ./imagecatalog/ ./autoscaling/... ./internal/...
	$(GO) vet -tags system ./bootstrap/... ./imagecatalog/ ./internal/kubetest/...

unit: ## fast loop: go test -race on every package (no e2e)
	$(GO) test -race -timeout $(UNIT_TIMEOUT) ./...

# -count=1: the suite runs `prebake serve` built by `go build` in a child
# process, which Go's test cache can't see, so a cached pass could hide a
# broken plugin.
e2e: ## end-to-end suite on the hermetic control plane (builds it once, cached): scale-up scenarios, mesh, deploy/ server-side dry-runs, join tokens, the catalog ConfigMap store
	$(GO) test -tags e2e -count=1 -p 1 -timeout $(E2E_TIMEOUT) -v ./e2e/... ./deploy/... ./bootstrap/... ./imagecatalog/ ./autoscaling/... ./internal/kubetest/...

# System tests (build tag system) need root, debootstrap and the network to a Debian mirror;
# they skip with one line when a prerequisite is missing, and fail under CI=true. The
# debootstrapped rootfs and kubelet/kubeadm are cached under ~/.cache/prebake.
SYSTEM_TIMEOUT ?= 40m
system: ## system tests: bootstrap's install phase in a real Debian rootfs (chroot), dpkg-lock bound; image builds whose builder runs in that rootfs; the test registry with containerd
	$(GO) test -race -tags system -count=1 -p 1 -timeout $(SYSTEM_TIMEOUT) -v -run 'TestInstall|TestDpkgLock|TestBuildObservesTheSandbox|TestBuildRejects|TestRegistry|TestContainerd' ./bootstrap/... ./imagecatalog/ ./internal/kubetest/registry/

test: check-generate vet unit system ciliumcompat e2e ## what CI runs: generated code check, vet, unit, system, the Cilium cross-check, e2e

# progress runs $(1) and says every 15 s that it still runs: a first build
# downloads modules and compiles for minutes, and must not look hung.
define progress
( $(1) ) & pid=$$!; s=0; \
while kill -0 $$pid 2>/dev/null; do sleep 1; s=$$((s+1)); \
  if [ $$((s % 15)) -eq 0 ]; then echo "  ... still $(2) ($${s}s)"; fi; done; wait $$pid
endef

demo: ## bring up a hermetic cluster + prebake, scale up, print the timeline and `prebake timeline`'s report (DEMO_FLAGS=-hold keeps the cluster up)
	@echo "make demo: compiling the demo driver and prebake (the first run downloads Go modules and takes minutes on 2 cores)"
	@$(call progress,$(GO) build -o bin/prebake-demo ./e2e/demo,compiling the demo driver)
	bin/prebake-demo $(DEMO_FLAGS)

demo-docker: ## real nodes in Docker containers (needs root, Docker, debootstrap): a prebaked and a vanilla node scale up, phase table at the end; the first run builds the images
	@echo "make demo-docker: compiling the demo driver (the first run also builds the control plane, node binaries and images: minutes on 2 cores)"
	@$(call progress,$(GO) build -o bin/prebake-demo-docker ./e2e/demodocker,compiling the demo driver)
	bin/prebake-demo-docker

bench: ## benchmark table: 100 groups, 5000 instances
	$(GO) run ./bench

bench-hcloud: ## Hetzner API requests per simulated hour, 1000 servers in 20 groups: the default vs a full scan per re-list vs naive (docs/performance.md)
	$(GO) run ./bench/hcloudrate

bench-gce: ## Compute Engine API requests per Refresh and per simulated hour, 1000 instances in 20 groups (docs/performance.md)
	$(GO) run ./bench/gcerate

bench-mesh: ## mesh join table: sequential vs round-scheduled vs declarative (simulated, 15 s/op modelled)
	$(GO) run ./mesh/cmd/bench
	$(GO) test -run '^$$' -bench 'BenchmarkPlan' -benchmem ./mesh/

# A separate test-only module, so that prebake's own module never depends on Cilium.
ciliumcompat: ## prove prebake's mesh objects with Cilium v1.20.2's own code: id/name rules, and its ClusterMesh + etcd client connecting with the rendered Secret to a real mTLS etcd
	@# -mod=mod: the module requires ours through replace ../.., so a change to
	@# our go.mod must not leave this one stale (it is a test-only module).
	cd mesh/ciliumcompat && GOFLAGS=-mod=mod $(GO) vet ./... && GOFLAGS=-mod=mod $(GO) test -count=1 ./...

bin/protoc-gen-go bin/protoc-gen-go-grpc: go.mod
	$(GO) build -o bin/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

generate: bin/protoc-gen-go bin/protoc-gen-go-grpc ## regenerate externalgrpc/proto (needs protoc: apt-get install protobuf-compiler)
	@command -v protoc >/dev/null || { echo "protoc not found: apt-get install -y protobuf-compiler"; exit 1; }
	cd externalgrpc/proto && $(GO) generate .

check-generate: generate ## fail when the generated code is not what `make generate` makes
	@git diff --exit-code -- externalgrpc/proto || { echo "generated code is stale: run 'make generate' and commit"; exit 1; }

fuzz: ## run each fuzz test for 20s
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./config/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./providers/kwok/providerid/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./providers/hcloud/providerid/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./providers/static/providerid/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./providers/docker/providerid/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./providers/gce/providerid/
	$(GO) test -run '^$$' -fuzz FuzzParseFilter -fuzztime 20s ./providers/gce/gcefake/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./mesh/
	$(GO) test -run '^$$' -fuzz FuzzParseName -fuzztime 20s ./imagecatalog/
	$(GO) test -run '^$$' -fuzz FuzzDecodeReport -fuzztime 20s ./imagecatalog/
	$(GO) test -run '^$$' -fuzz FuzzRender -fuzztime 20s ./bootstrap/
	$(GO) test -run '^$$' -fuzz FuzzBuilder -fuzztime 20s ./bootstrap/

clean:
	rm -rf bin e2e/out
