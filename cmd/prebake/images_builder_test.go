package main

import (
	"strings"
	"testing"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
)

// TestBuilderUserDataTakesTheConfigsSources: a recipe component that --config's bootstrap
// block downloads is installed from the same url and sha256 (at the same version, or the
// build is refused naming both), an apt one by the block's package name; the recipe's
// containerImages are pulled; the provider's node runtime configures the builder.
func TestBuilderUserDataTakesTheConfigsSources(t *testing.T) {
	versions := cliVersions()
	versions["kubelet"] = "v1.35.4"
	versions["kubernetes-cni"] = "1.1.1+ds1-3+b5"
	spec := imagecatalog.BuildSpec{Provider: "docker", Components: versions, ContainerImages: []string{"172.18.0.1:5000/prebake/pause:1"}}
	sha := strings.Repeat("ab", 32)
	src := builderSources{
		runtime: bootstrap.Runtime{SharedKernel: true, SandboxImage: "172.18.0.1:5000/prebake/pause:1",
			Registries: []bootstrap.Registry{{Host: "172.18.0.1:5000", Endpoint: "http://172.18.0.1:5000"}}},
		components: map[string]bootstrap.Component{
			"kubelet":        {Name: "kubelet", Version: "v1.35.4", URL: "http://172.18.0.1:8080/kubelet", SHA256: sha, Path: "/usr/bin/kubelet"},
			"kubernetes-cni": {Name: "kubernetes-cni", Version: "1.1.1+ds1-3+b5", Package: "containernetworking-plugins"},
		},
	}
	ud, err := builderUserData(spec, src)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"component bin 'kubelet' 'v1.35.4' 'kubelet' 'http://172.18.0.1:8080/kubelet' '" + sha + "' '/usr/bin/kubelet'",
		"component apt 'kubernetes-cni' '1.1.1+ds1-3+b5' 'containernetworking-plugins'",
		"component apt 'socat' '1.0.0-1' 'socat'",
		"PREBAKE_BUILDER_IMAGES='172.18.0.1:5000/prebake/pause:1'",
		"PREBAKE_SHARED_KERNEL='1'",
		"/etc/containerd/certs.d/172.18.0.1:5000/hosts.toml",
	} {
		if !strings.Contains(string(ud), want) {
			t.Errorf("builder user-data lacks %q", want)
		}
	}

	src.components["kubelet"] = bootstrap.Component{Name: "kubelet", Version: "v1.35.3", URL: "http://172.18.0.1:8080/kubelet", SHA256: sha, Path: "/usr/bin/kubelet"}
	_, err = builderUserData(spec, src)
	if err == nil || !strings.Contains(err.Error(), "component kubelet: the recipe asks for v1.35.4, but bootstrap.components downloads v1.35.3") {
		t.Errorf("builderUserData with another kubelet version: %v", err)
	}
}
