package docker

// Tests that need no engine.

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
)

func TestNewChecksOptions(t *testing.T) {
	t.Parallel()
	ok := Options{Cluster: "c", BaseImage: "prebake-base:debian-12"}
	tests := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"no cluster", func(o *Options) { o.Cluster = "" }, "Options.Cluster is empty"},
		{"cluster not a label value", func(o *Options) { o.Cluster = "a b" }, "not a valid label value"},
		{"no base image", func(o *Options) { o.BaseImage = "" }, "providers.docker.baseImage"},
		{"repository with a tag", func(o *Options) { o.ImageRepository = "prebake-node:v1" }, "not a repository name"},
		{"bad prefix", func(o *Options) { o.NamePrefix = "-x" }, "can't start a container name"},
		{"type without cpu", func(o *Options) {
			o.MachineTypes = []providers.MachineType{{Name: "t", MemoryBytes: 1}}
		}, "must be positive"},
		{"type twice", func(o *Options) {
			o.MachineTypes = []providers.MachineType{testMachineType, testMachineType}
		}, "listed twice"},
		{"gpus", func(o *Options) {
			mt := testMachineType
			mt.GPUs = 1
			o.MachineTypes = []providers.MachineType{mt}
		}, "GPUs"},
		{"negative capacity", func(o *Options) { o.Capacity = map[string]int{"z": -1} }, "want 0 or more"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := ok
			tc.edit(&o)
			if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	p, err := New(Options{Cluster: "c", BaseImage: "b", ImageRepository: "docker.io/library/prebake-node"})
	if err != nil {
		t.Fatal(err)
	}
	if p.repo != "prebake-node" {
		t.Errorf("repository %q, want the familiar prebake-node the engine lists", p.repo)
	}
	mt, err := p.MachineType(context.Background(), "docker-small", "zone-a")
	if err != nil || mt.MilliCPU != 1000 || mt.MemoryBytes != 1<<30 || mt.Arch == "" {
		t.Errorf("default docker-small = %+v, %v", mt, err)
	}
	if _, err := p.MachineType(context.Background(), "nope", "zone-a"); !errors.Is(err, providers.ErrNotFound) || !strings.Contains(err.Error(), "docker-medium, docker-small") {
		t.Errorf("unknown type: %v, want ErrNotFound listing the known ones", err)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	p := &Provider{}
	// What the real client returns when no engine listens.
	dead, err := client.NewClientWithOpts(client.WithHost("unix://"+filepath.Join(t.TempDir(), "none.sock")), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	_, unreachable := dead.ContainerList(context.Background(), containerListOptions())
	if unreachable == nil {
		t.Fatal("listing through a socket nobody listens on succeeded")
	}
	wrap := func(err error) error { return fmt.Errorf("docker: create container %q: %w", "x", err) }
	tests := []struct {
		name  string
		err   error
		class providers.ErrorClass
		code  string
		retry bool
	}{
		{"zone full", &capacityError{zone: "z", limit: 1}, providers.ErrorOutOfResources, "resource_unavailable", false},
		{"address pools", wrap(errors.New("Error response from daemon: could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network")), providers.ErrorOutOfResources, "address_pools_exhausted", false},
		{"image missing", wrap(&imageNotFoundError{ref: "x:y"}), providers.ErrorOther, "image_not_found", false},
		{"foreign container", &foreignError{name: "x"}, providers.ErrorOther, "name_conflict", false},
		{"foreign network", &networkConflictError{name: "n"}, providers.ErrorOther, "network_conflict", false},
		{"machine too big", &machineTooBigError{}, providers.ErrorOther, "machine_type_exceeds_host", false},
		{"unknown type", fmt.Errorf("docker: machine type %q: %w", "x", providers.ErrNotFound), providers.ErrorOther, "machine_type_not_found", false},
		{"boot failed on a 500", &bootError{name: "x", err: cerrdefs.ErrInternal}, providers.ErrorOther, "boot_failed", false},
		{"engine unreachable", wrap(unreachable), providers.ErrorOther, "engine_unreachable", true},
		{"timeout", wrap(context.DeadlineExceeded), providers.ErrorOther, "timeout", true},
		{"500", wrap(cerrdefs.ErrInternal), providers.ErrorOther, "engine_error", true},
		{"503", wrap(cerrdefs.ErrUnavailable), providers.ErrorOther, "engine_error", true},
		{"429", wrap(cerrdefs.ErrResourceExhausted), providers.ErrorOther, "rate_limit_exceeded", true},
		{"409", wrap(cerrdefs.ErrConflict), providers.ErrorOther, "conflict", true},
		{"400", wrap(cerrdefs.ErrInvalidArgument), providers.ErrorOther, "invalid_request", false},
		{"anything else", errors.New("boom"), providers.ErrorOther, "create_failed", false},
	}
	for _, tc := range tests {
		got := p.Classify(tc.err)
		if want := (providers.Classification{Class: tc.class, Code: tc.code, Retryable: tc.retry}); got != want {
			t.Errorf("%s: Classify(%v) = %+v, want %+v", tc.name, tc.err, got, want)
		}
	}
	if got := p.Classify(nil); got != (providers.Classification{}) {
		t.Errorf("Classify(nil) = %+v", got)
	}
}

func TestSeedArchive(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	host := hostInfo{milliCPU: 8000, memoryBytes: 32 << 30}
	mt := providers.MachineType{Name: "m", MilliCPU: 2000, MemoryBytes: 4 << 30}
	reserved := providers.Reserved{MilliCPU: 100, MemoryBytes: 256 << 20}
	files := append(nocloudSeed("workers-a1", []byte("#cloud-config\nsecret\n")), kubeletPatch(host, mt, reserved))
	b, err := seedArchive(files, now)
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Mode int64
		Body string
	}
	got := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg || !h.ModTime.Equal(now) {
			t.Errorf("%s: type %c, mtime %v", h.Name, h.Typeflag, h.ModTime)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = entry{h.Mode, string(body)}
	}
	want := map[string]entry{
		"var/lib/cloud/seed/nocloud/meta-data":      {0o644, "instance-id: workers-a1\nlocal-hostname: workers-a1\n"},
		"var/lib/cloud/seed/nocloud/user-data":      {0o600, "#cloud-config\nsecret\n"},
		"var/lib/cloud/seed/nocloud/network-config": {0o644, "network:\n  config: disabled\n"},
		"etc/prebake/kubeadm-patches/kubeletconfigurationdockercapacity+merge.yaml": {0o644,
			"# prebake docker provider: this kubelet reports the host's CPUs and memory as capacity;\n" +
				"# systemReserved holds back the host beyond the machine type plus kubeReserved (less the\n" +
				"# kubelet's own memory eviction threshold), so allocatable is the node group template's.\n" +
				"systemReserved:\n  cpu: 6100m\n  memory: \"30228348928\"\n"},
	}
	// The kubelet's allocatable (capacity = the host, less systemReserved, less its
	// 100Mi eviction threshold) is the template's (the machine type less kubeReserved).
	if got, want := host.memoryBytes-30228348928-EvictionHardMemory, mt.MemoryBytes-reserved.MemoryBytes; got != want {
		t.Errorf("the kubelet's allocatable memory would be %d, the template's is %d", got, want)
	}
	if got, want := host.milliCPU-6100, mt.MilliCPU-reserved.MilliCPU; got != want {
		t.Errorf("the kubelet's allocatable cpu would be %dm, the template's is %dm", got, want)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("seed archive (-want +got):\n%s", d)
	}
	if p := kubeletPatch(host, providers.MachineType{MilliCPU: 9000, MemoryBytes: 1, Pods: 30}, providers.Reserved{}); !strings.Contains(string(p.body), "cpu: 0m") || !strings.Contains(string(p.body), "maxPods: 30") {
		t.Errorf("patch of a type beyond the host:\n%s", p.body)
	}
	if _, err := seedArchive([]seedFile{{"relative", 0o644, nil}}, now); err == nil {
		t.Error("seedArchive took a relative path")
	}
}

func TestLabelChange(t *testing.T) {
	t.Parallel()
	got, err := labelChange(map[string]string{"b": `x"$y\`, "a": ""})
	if err != nil {
		t.Fatal(err)
	}
	if want := `LABEL "a"="" "b"="x\"\$y\\"`; got != want {
		t.Errorf("labelChange = %s, want %s", got, want)
	}
	if _, err := labelChange(map[string]string{"a": "x\ny"}); err == nil {
		t.Error("labelChange took a line break")
	}
	if _, err := labelChange(map[string]string{"": "x"}); err == nil {
		t.Error("labelChange took an empty key")
	}
}

func TestInstanceStates(t *testing.T) {
	t.Parallel()
	labels := map[string]string{providers.LabelMachine: "m1", providers.LabelGroup: "g", providers.LabelImage: "img", providers.LabelImageKind: "prebaked"}
	for state, want := range map[string]providers.InstanceState{
		"created": providers.StateCreating, "running": providers.StateRunning, "restarting": providers.StateRunning,
		"paused": providers.StateRunning, "removing": providers.StateDeleting, "exited": providers.StateRunning, "dead": providers.StateRunning,
	} {
		in := instance("pfx-m1", labels, state, "Exited (0)", time.Unix(100, 0))
		if in.State != want || in.ProviderID != "docker://pfx-m1" || in.Name != "m1" || in.Group != "g" || in.Image != "img" || in.ImageKind != providers.ImagePrebaked {
			t.Errorf("%s: %+v", state, in)
		}
		if failed := state == "exited" || state == "dead"; (in.Error != nil) != failed {
			t.Errorf("%s: error %+v", state, in.Error)
		}
	}
	if in := instance("x1", nil, "running", "", time.Time{}); in.Name != "x1" || in.ImageKind != providers.ImageRuntimeInstall {
		t.Errorf("unlabelled: %+v", in)
	}
}

// TestCapabilitiesDeclareTheNodeRuntime: every node of the provider gets the runtime a
// container on a shared host needs, whatever the config says, with the config's sandbox
// image, registries and kubelet keys merged in; the provider's copy can't be changed
// through what it returns.
func TestCapabilitiesDeclareTheNodeRuntime(t *testing.T) {
	t.Parallel()
	bare, err := New(Options{Cluster: "c", BaseImage: "base:1"})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(IntrinsicNodeRuntime(), bare.Capabilities().NodeRuntime); d != "" {
		t.Errorf("runtime without config (-want +got):\n%s", d)
	}
	given := bootstrap.Runtime{
		SandboxImage:          "172.18.0.1:5000/prebake/pause:1",
		Registries:            []bootstrap.Registry{{Host: "172.18.0.1:5000", Endpoint: "http://172.18.0.1:5000"}},
		Kubelet:               map[string]any{"serializeImagePulls": false},
		IgnorePreflightErrors: []string{"SystemVerification", "Swap"},
	}
	p, err := New(Options{Cluster: "c", BaseImage: "base:1", NodeRuntime: given})
	if err != nil {
		t.Fatal(err)
	}
	caps := p.Capabilities()
	if !caps.BootsImages || caps.UserData != providers.UserDataCloudInit {
		t.Errorf("capabilities %+v", caps)
	}
	want := bootstrap.Runtime{
		SharedKernel: true, RestrictOOMScoreAdj: true,
		SandboxImage: given.SandboxImage, Registries: given.Registries,
		Kubelet:               map[string]any{"failCgroupV1": false, "serializeImagePulls": false},
		IgnorePreflightErrors: []string{"SystemVerification", "Swap"},
		PodNetwork:            &bootstrap.PodNetwork{},
	}
	if d := cmp.Diff(want, caps.NodeRuntime); d != "" {
		t.Errorf("merged runtime (-want +got):\n%s", d)
	}
	caps.NodeRuntime.Kubelet["failCgroupV1"] = true
	caps.NodeRuntime.PodNetwork.Bridge = "changed"
	if d := cmp.Diff(want, p.Capabilities().NodeRuntime); d != "" {
		t.Errorf("a caller changed the provider's runtime (-want +got):\n%s", d)
	}
	// The config's kubelet keys win over the intrinsic ones.
	q, err := New(Options{Cluster: "c", BaseImage: "base:1", NodeRuntime: bootstrap.Runtime{Kubelet: map[string]any{"failCgroupV1": true}}})
	if err != nil {
		t.Fatal(err)
	}
	if v := q.Capabilities().NodeRuntime.Kubelet["failCgroupV1"]; v != true {
		t.Errorf("failCgroupV1 = %v, want the config's true", v)
	}
}
