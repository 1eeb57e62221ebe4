package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
)

const dockerBase = `apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: demo
providers:
  docker:
    baseImage: prebake-docker-base:bookworm
    machineTypes:
      - {name: docker-1c, cpu: "1", memory: 1Gi, pods: 30}
    capacity: {zone-a: 3}
nodeGroups:
  - id: real
    provider: docker
    minSize: 0
    maxSize: 3
    machineType: docker-1c
    location: zone-a
`

func TestParseDocker(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(dockerBase), "docker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &DockerProvider{
		BaseImage: "prebake-docker-base:bookworm", ImageRepository: "prebake-node",
		MachineTypes: []MachineType{{Name: "docker-1c", CPU: q("1"), Memory: q("1Gi"), Pods: 30, Arch: "amd64"}},
		Capacity:     map[string]int{"zone-a": 3},
	}
	if d := cmp.Diff(want, c.Providers.Docker); d != "" {
		t.Errorf("providers.docker (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"docker"}, c.Providers.Names()); d != "" {
		t.Errorf("Names (-want +got):\n%s", d)
	}
	mts := c.Providers.Docker.MachineTypeList()
	if d := cmp.Diff([]providers.MachineType{{Name: "docker-1c", MilliCPU: 1000, MemoryBytes: 1 << 30, Pods: 30, Arch: "amd64"}}, mts); d != "" {
		t.Errorf("MachineTypeList (-want +got):\n%s", d)
	}
}

func TestParseDockerNode(t *testing.T) {
	t.Parallel()
	in := strings.Replace(dockerBase, "    capacity: {zone-a: 3}\n", `    capacity: {zone-a: 3}
    node:
      sandboxImage: 172.18.0.1:5000/prebake/pause:1
      registries:
        - host: 172.18.0.1:5000
        - {host: registry.local, endpoint: https://10.0.0.5:8443}
`, 1)
	c, err := Parse([]byte(in), "docker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := bootstrap.Runtime{
		SandboxImage: "172.18.0.1:5000/prebake/pause:1",
		Registries: []bootstrap.Registry{
			{Host: "172.18.0.1:5000", Endpoint: "http://172.18.0.1:5000"}, // plain HTTP unless told
			{Host: "registry.local", Endpoint: "https://10.0.0.5:8443"},
		},
	}
	if d := cmp.Diff(want, c.Providers.Docker.NodeRuntime()); d != "" {
		t.Errorf("NodeRuntime (-want +got):\n%s", d)
	}
	plain, err := Parse([]byte(dockerBase), "docker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(bootstrap.Runtime{}, plain.Providers.Docker.NodeRuntime()); d != "" {
		t.Errorf("NodeRuntime without a node block (-want +got):\n%s", d)
	}
}

func TestDockerErrors(t *testing.T) {
	t.Parallel()
	edit := func(pairs ...string) string {
		s := dockerBase
		for i := 0; i < len(pairs); i += 2 {
			if !strings.Contains(s, pairs[i]) {
				t.Fatalf("base lacks %q", pairs[i])
			}
			s = strings.Replace(s, pairs[i], pairs[i+1], 1)
		}
		return s
	}
	const base = "    baseImage: prebake-docker-base:bookworm\n"
	tests := []struct {
		name, in, want string
	}{
		{"no base image", edit(base, "    host: unix:///var/run/docker.sock\n"), `docker.yaml:5: providers.docker.baseImage is required`},
		{"base image not a reference", edit("prebake-docker-base:bookworm", "Prebake Base"), `docker.yaml:6: providers.docker.baseImage "Prebake Base" is not an image reference`},
		{"host not an address", edit(base, base+"    host: /var/run/docker.sock\n"), `docker.yaml:7: providers.docker.host "/var/run/docker.sock" is not an engine address`},
		{"host http", edit(base, base+"    host: http://127.0.0.1:2375\n"), `docker.yaml:7: providers.docker.host "http://127.0.0.1:2375" is not an engine address`},
		{"tcp without port", edit(base, base+"    host: tcp://127.0.0.1\n"), `docker.yaml:7: providers.docker.host "tcp://127.0.0.1": a tcp address needs a host and a port`},
		{"repository with a tag", edit(base, base+"    imageRepository: prebake-node:v1\n"), `docker.yaml:7: providers.docker.imageRepository "prebake-node:v1" is not a repository name`},
		{"prefix", edit(base, base+"    containerNamePrefix: -ci\n"), `docker.yaml:7: providers.docker.containerNamePrefix "-ci" can't start a container name`},
		{"gpus", edit("pods: 30}", "pods: 30, gpus: 1}"), `docker.yaml:8: providers.docker.machineTypes[0].gpus is 1; the docker provider passes no GPUs through`},
		{"no cpu", edit(`cpu: "1", `, ""), `docker.yaml:8: providers.docker.machineTypes[0].cpu is 0`},
		{"empty types", edit("    machineTypes:\n      - {name: docker-1c, cpu: \"1\", memory: 1Gi, pods: 30}\n", "    machineTypes: []\n"), `docker.yaml:7: providers.docker.machineTypes is empty`},
		{"negative capacity", edit("{zone-a: 3}", "{zone-a: -1}"), `docker.yaml:9: providers.docker.capacity.zone-a is -1; use 0 (no room) or more`},
		{"group type not declared", edit("machineType: docker-1c", "machineType: docker-2c"), `docker.yaml:15: node group "real": machineType "docker-2c" is not in providers.docker.machineTypes`},
		{"unknown field", edit(base, base+"    privileged: true\n"), `docker.yaml:7: unknown field "privileged"`},
		{"sandbox image", edit(base, base+"    node: {sandboxImage: \"Pause Image\"}\n"), `docker.yaml:7: providers.docker.node.sandboxImage "Pause Image": want an image reference`},
		{"registry host", edit(base, base+"    node:\n      registries:\n        - {host: \"http://r:5000\"}\n"), `docker.yaml:9: providers.docker.node.registries[0].host "http://r:5000": want host[:port]`},
		{"registry endpoint", edit(base, base+"    node:\n      registries:\n        - {host: r:5000, endpoint: ftp://r}\n"), `docker.yaml:9: providers.docker.node.registries[0].endpoint "ftp://r": want an http(s) URL`},
		{"registry twice", edit(base, base+"    node:\n      registries:\n        - {host: r:5000}\n        - {host: r:5000}\n"), `providers.docker.node.registries[1].host "r:5000": listed twice`},
		{"registries empty", edit(base, base+"    node: {registries: []}\n"), `docker.yaml:7: providers.docker.node.registries is empty`},
		{"node unknown field", edit(base, base+"    node: {sandbox: x}\n"), `unknown field "sandbox"`},
		{"provider not configured", "apiVersion: prebake.dev/v1alpha1\nkind: ProviderConfig\nclusterName: demo\nproviders:\n  kwok: {}\n" + dockerBase[strings.Index(dockerBase, "nodeGroups:"):], `provider "docker" is not configured`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.in), "docker.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
