package app

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/providers/docker"
)

// TestNewDockerMapsTheNodeBlock: the docker provider the factory builds declares the
// runtime every container node needs with the config's node block merged in, and takes
// kubeReserved, so its kubelets reserve what the templates do.
func TestNewDockerMapsTheNodeBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docker.yaml")
	body := `apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: test
kubeReserved: {cpu: 200m, memory: 300Mi}
providers:
  docker:
    baseImage: prebake-docker-base:bookworm
    node:
      sandboxImage: 172.18.0.1:5000/prebake/pause:1
      registries: [{host: "172.18.0.1:5000"}]
nodeGroups:
  - {id: g, provider: docker, maxSize: 3, machineType: docker-small, location: zone-a}
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewProvider(context.Background(), cfg, "docker", Deps{})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := b.Provider.(*docker.Provider)
	if !ok {
		t.Fatalf("provider %T, want *docker.Provider", b.Provider)
	}
	defer p.Close()
	rt := p.Capabilities().NodeRuntime
	if !rt.SharedKernel || !rt.RestrictOOMScoreAdj || rt.PodNetwork == nil || !slices.Contains(rt.IgnorePreflightErrors, "SystemVerification") {
		t.Errorf("runtime %+v lacks what every docker node needs", rt)
	}
	if rt.SandboxImage != "172.18.0.1:5000/prebake/pause:1" ||
		!slices.Equal(rt.Registries, []bootstrap.Registry{{Host: "172.18.0.1:5000", Endpoint: "http://172.18.0.1:5000"}}) {
		t.Errorf("runtime %+v lacks the node block's sandbox image and registry", rt)
	}
	if got := p.Reserved(); got.MilliCPU != 200 || got.MemoryBytes != 300<<20 {
		t.Errorf("reserved %+v, want kubeReserved 200m / 300Mi", got)
	}
}
