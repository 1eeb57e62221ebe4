package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/baseimage"
	"github.com/prebake-dev/prebake/providers/docker/providerid"
)

// syncBuffer is a log sink the provider's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func request(name string) providers.CreateRequest {
	return providers.CreateRequest{
		Name: name, Group: "workers", MachineType: testMachineType.Name, Location: "zone-a",
		ImageKind: providers.ImageRuntimeInstall, UserData: []byte("#cloud-config\n"),
	}
}

// readFile reads one file out of a container.
func readFile(t *testing.T, c *client.Client, id, path string) (*tar.Header, []byte) {
	t.Helper()
	rc, _, err := c.CopyFromContainer(context.Background(), id, path)
	if err != nil {
		t.Fatalf("read %s from the container: %v", path, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return h, body
}

// TestCreateBootsLikeAVM: the container is made with exactly the boot
// settings, the machine type's limits, its labels and hostname, on its
// zone's network, with the NoCloud seed and the kubelet's capacity patch
// in it before it starts; the user-data is never logged.
func TestCreateBootsLikeAVM(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	o := testOptions(t, sleeperImage(t, c))
	logs := &syncBuffer{}
	o.Reserved = providers.Reserved{MilliCPU: 100, MemoryBytes: 256 << 20}
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newTestProvider(t, o)
	ctx := context.Background()
	req := request("workers-a1b2c")
	const secret = "token: abcdef.0123456789abcdef"
	req.UserData = []byte("#cloud-config\n# " + secret + "\n")
	req.NodeLabels = map[string]string{"team": "x"}
	in, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	name := o.NamePrefix + req.Name
	if want := "docker://" + name; in.ProviderID != want {
		t.Errorf("providerID %q, want %q", in.ProviderID, want)
	}
	if id, known := p.ProviderID(req); !known || id != in.ProviderID {
		t.Errorf("ProviderID = %q, %v; Create gave %q", id, known, in.ProviderID)
	}
	if in.State != providers.StateRunning || in.Name != req.Name || in.Group != req.Group || in.ImageKind != providers.ImageRuntimeInstall {
		t.Errorf("instance %+v", in)
	}
	ci, err := c.ContainerInspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !ci.State.Running {
		t.Errorf("container is %s, want running", ci.State.Status)
	}
	cfg, hc := ci.Config, ci.HostConfig
	if d := cmp.Diff([]string{baseimage.InitPath}, []string(cfg.Entrypoint)); d != "" {
		t.Errorf("entrypoint (-want +got):\n%s", d)
	}
	if len(cfg.Cmd) != 0 {
		t.Errorf("cmd %q, want none (the image's is dropped)", cfg.Cmd)
	}
	if !slices.Contains(cfg.Env, "container=docker") {
		t.Errorf("env %q lacks container=docker", cfg.Env)
	}
	if cfg.Hostname != req.Name || cfg.StopSignal != "SIGRTMIN+3" {
		t.Errorf("hostname %q, stop signal %q; want %q, SIGRTMIN+3", cfg.Hostname, cfg.StopSignal, req.Name)
	}
	wantLabels := map[string]string{
		providers.LabelCluster: o.Cluster, providers.LabelGroup: "workers", providers.LabelMachine: req.Name,
		providers.LabelImageKind: "runtime-install", providers.LabelZone: "zone-a", providers.LabelInstanceType: testMachineType.Name,
	}
	for k, v := range wantLabels {
		if cfg.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], v)
		}
	}
	if _, ok := cfg.Labels[providers.LabelImage]; ok {
		t.Errorf("a base-image machine carries %s", providers.LabelImage)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"CapAdd", []string(hc.CapAdd), []string{"ALL"}},
		{"CapDrop", capNames(hc.CapDrop), []string{"SYS_RESOURCE"}},
		{"SecurityOpt", hc.SecurityOpt, []string{"seccomp=unconfined", "apparmor=unconfined"}},
		{"CgroupnsMode", string(hc.CgroupnsMode), "private"},
		{"Binds", hc.Binds, []string(nil)},
		{"Tmpfs", hc.Tmpfs, map[string]string{"/run": "rw,exec", "/run/lock": "rw", "/tmp": "rw,exec"}},
		{"Sysctls", hc.Sysctls, baseimage.DefaultNodeSysctls},
		{"NanoCPUs", hc.NanoCPUs, int64(500_000_000)},
		{"Memory", hc.Memory, int64(256 << 20)},
		{"MemorySwap", hc.MemorySwap, int64(256 << 20)},
		{"Privileged", hc.Privileged, false},
	}
	for _, ck := range checks {
		if d := cmp.Diff(ck.want, ck.got); d != "" {
			t.Errorf("HostConfig.%s (-want +got):\n%s", ck.what, d)
		}
	}
	// containerd's root is the machine's own volume, labelled like it.
	if len(hc.Mounts) != 1 || hc.Mounts[0].Type != "volume" || hc.Mounts[0].Source != name+"-containerd" || hc.Mounts[0].Target != baseimage.ContainerdDir {
		t.Errorf("mounts %+v, want volume %s-containerd at %s", hc.Mounts, name, baseimage.ContainerdDir)
	}
	vol, err := c.VolumeInspect(ctx, name+"-containerd")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range wantLabels {
		if vol.Labels[k] != v {
			t.Errorf("volume label %s = %q, want %q", k, vol.Labels[k], v)
		}
	}
	var devs []string
	for _, d := range hc.Devices {
		devs = append(devs, d.PathOnHost+":"+d.PathInContainer)
	}
	var wantDevs []string
	for _, d := range p.devices {
		wantDevs = append(wantDevs, d+":"+d)
	}
	if d := cmp.Diff(wantDevs, devs); d != "" {
		t.Errorf("devices (-want +got):\n%s", d)
	}

	// The zone network is ours, and the container is on it under its name.
	n, err := c.NetworkInspect(ctx, string(hc.NetworkMode), network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "prebake-"+o.Cluster+"-zone-a" || n.Labels[providers.LabelCluster] != o.Cluster || n.Labels[providers.LabelZone] != "zone-a" {
		t.Errorf("network %q labels %v", n.Name, n.Labels)
	}
	if ep := ci.NetworkSettings.Networks[n.Name]; ep == nil || !slices.Contains(ep.Aliases, req.Name) {
		t.Errorf("container's endpoints %v: want one on %s with alias %s", ci.NetworkSettings.Networks, n.Name, req.Name)
	}

	// The seed, as cloud-init's NoCloud data source reads it.
	h, ud := readFile(t, c, ci.ID, SeedDir+"/user-data")
	if !bytes.Equal(ud, req.UserData) || h.Mode&0o777 != 0o600 {
		t.Errorf("user-data mode %o %q, want 0600 %q", h.Mode&0o777, ud, req.UserData)
	}
	_, md := readFile(t, c, ci.ID, SeedDir+"/meta-data")
	if want := "instance-id: " + req.Name + "\nlocal-hostname: " + req.Name + "\n"; string(md) != want {
		t.Errorf("meta-data %q, want %q", md, want)
	}
	_, nc := readFile(t, c, ci.ID, SeedDir+"/network-config")
	if !strings.Contains(string(nc), "config: disabled") {
		t.Errorf("network-config %q does not turn cloud-init's network config off", nc)
	}
	// The kubelet's reservation is the host beyond the machine type, plus kubeReserved,
	// less the kubelet's own eviction threshold.
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, patch := readFile(t, c, ci.ID, KubeletCapacityPatch)
	wantCPU := fmt.Sprintf("cpu: %dm\n", int64(info.NCPU)*1000-testMachineType.MilliCPU+o.Reserved.MilliCPU)
	wantMem := fmt.Sprintf("memory: \"%d\"\n", info.MemTotal-testMachineType.MemoryBytes+o.Reserved.MemoryBytes-EvictionHardMemory)
	if !strings.Contains(string(patch), wantCPU) || !strings.Contains(string(patch), wantMem) || !strings.Contains(string(patch), "maxPods: 20\n") {
		t.Errorf("kubelet patch:\n%s\nwant %q, %q and maxPods: 20", patch, wantCPU, wantMem)
	}

	if strings.Contains(logs.String(), "abcdef") {
		t.Errorf("the user-data was logged:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "machine created") {
		t.Errorf("no log line for the creation:\n%s", logs.String())
	}

	// Listed as it is, and again by a Create of the same name.
	again, err := p.Create(ctx, req)
	if err != nil || again.ProviderID != in.ProviderID {
		t.Fatalf("retried Create = %+v, %v", again, err)
	}
	listed, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ProviderID != in.ProviderID || listed[0].State != providers.StateRunning {
		t.Errorf("List = %+v", listed)
	}
}

// TestCatalogImageBoots: a request with a catalog image boots that image (a
// tag of the repository) and carries its id; a catalog image the engine
// lacks is a clear error naming it.
func TestCatalogImageBoots(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	base := sleeperImage(t, c)
	o := testOptions(t, base)
	p := newTestProvider(t, o)
	ctx := context.Background()
	const id = "prebake-debian-12-k8s-1-35-4-amd64-20261201t1504"
	if err := c.ImageTag(ctx, base, o.ImageRepository+":"+id); err != nil {
		t.Fatal(err)
	}
	req := request("workers-img01")
	req.Image, req.ImageKind = id, providers.ImagePrebaked
	in, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if in.Image != id || in.ImageKind != providers.ImagePrebaked {
		t.Errorf("instance image %q kind %q, want %q prebaked", in.Image, in.ImageKind, id)
	}
	ci, err := c.ContainerInspect(ctx, o.NamePrefix+req.Name)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Config.Image != o.ImageRepository+":"+id || ci.Config.Labels[providers.LabelImage] != id {
		t.Errorf("container image %q, label %q", ci.Config.Image, ci.Config.Labels[providers.LabelImage])
	}
	missing := request("workers-img02")
	missing.Image = "prebake-debian-12-k8s-1-35-4-amd64-20200101t0000"
	_, err = p.Create(ctx, missing)
	var nf *imageNotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), missing.Image) {
		t.Fatalf("Create of a missing catalog image: %v, want an error naming it", err)
	}
	if cl := p.Classify(err); cl.Code != "image_not_found" || cl.Retryable || cl.Class != providers.ErrorOther {
		t.Errorf("Classify = %+v", cl)
	}
}

// TestBootFailureLeavesNothing: an image that can't boot (no prebake-container-init)
// fails Create, and its container is removed, so a retry starts afresh.
func TestBootFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	ref := fmt.Sprintf("%simg-%s-%d:noinit", testPrefix, runID, clusterSeq.Add(1))
	importImage(t, c, ref, []tarFile{{name: "etc/", mode: 0o755, dir: true}, {name: "etc/hostname", mode: 0o644, body: []byte("x\n")}})
	o := testOptions(t, ref)
	p := newTestProvider(t, o)
	ctx := context.Background()
	_, err := p.Create(ctx, request("workers-boot1"))
	var be *bootError
	if !errors.As(err, &be) {
		t.Fatalf("Create = %v, want a boot error", err)
	}
	if _, err := c.ContainerInspect(ctx, o.NamePrefix+"workers-boot1"); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the container that failed to boot is still there (inspect: %v)", err)
	}
	if !volumeGone(t, c, o.NamePrefix+"workers-boot1-containerd") {
		t.Error("the volume of the container that failed to boot is still there")
	}
	if cl := p.Classify(err); cl.Code != "boot_failed" || cl.Retryable {
		t.Errorf("Classify = %+v", cl)
	}
}

// TestCreateFinishesAnInterruptedCreate: a container an earlier attempt
// created but did not start (the process died) is seeded and started by
// the retry, not left behind or duplicated.
func TestCreateFinishesAnInterruptedCreate(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	o := testOptions(t, sleeperImage(t, c))
	p := newTestProvider(t, o)
	ctx := context.Background()
	req := request("workers-half1")
	mt, err := p.checkRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	p.netMu.RLock()
	id, err := p.createContainer(ctx, req, o.NamePrefix+req.Name, o.BaseImage, mt)
	p.netMu.RUnlock()
	if err != nil || id == "" {
		t.Fatalf("createContainer = %q, %v", id, err)
	}
	listed, err := p.List(ctx)
	if err != nil || len(listed) != 1 || listed[0].State != providers.StateCreating {
		t.Fatalf("List of a created container = %+v, %v; want it creating", listed, err)
	}
	q, err := New(o) // the restarted plugin
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	in, err := q.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != providers.StateRunning {
		t.Errorf("state %v after the retry, want running", in.State)
	}
	ci, err := c.ContainerInspect(ctx, id)
	if err != nil || !ci.State.Running {
		t.Fatalf("the first attempt's container: %+v, %v; want it running", ci.State, err)
	}
	if _, ud := readFile(t, c, id, SeedDir+"/user-data"); !bytes.Equal(ud, req.UserData) {
		t.Errorf("user-data %q after the retry", ud)
	}
	cs, err := c.ContainerList(ctx, containerListOptions(filters.Arg("label", providers.LabelCluster+"="+o.Cluster)))
	if err != nil || len(cs) != 1 {
		t.Errorf("%d containers of the cluster (%v), want 1", len(cs), err)
	}
}

// TestDeleteRemovesContainerAndVolumes: Delete removes the container, its
// containerd volume and its anonymous volumes, removes the volume a machine
// whose container is gone left, refuses a container that is not ours, and
// takes a gone one as done. Cleanup removes a volume no container uses.
func TestDeleteRemovesContainerAndVolumes(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	o := testOptions(t, sleeperImage(t, c, "VOLUME /data"))
	p := newTestProvider(t, o)
	ctx := context.Background()
	in, err := p.Create(ctx, request("workers-vol01"))
	if err != nil {
		t.Fatal(err)
	}
	name := o.NamePrefix + "workers-vol01"
	ci, err := c.ContainerInspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var vols []string
	named := false
	for _, m := range ci.Mounts {
		if m.Type == "volume" {
			vols = append(vols, m.Name)
			named = named || m.Name == name+"-containerd" && m.Destination == baseimage.ContainerdDir
		}
	}
	if len(vols) != 2 || !named {
		t.Fatalf("mounts %+v: want the containerd volume %s-containerd and one anonymous volume", ci.Mounts, name)
	}
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ContainerInspect(ctx, ci.ID); !cerrdefs.IsNotFound(err) {
		t.Errorf("container still there after Delete (inspect: %v)", err)
	}
	for _, v := range vols {
		if !volumeGone(t, c, v) {
			t.Errorf("volume %s left after Delete", v)
			_ = c.VolumeRemove(ctx, v, true)
		}
	}
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Errorf("Delete of a gone machine: %v", err)
	}

	// A machine whose container is gone but whose volume is left (a process killed
	// in between): Delete removes the volume; Cleanup removes another such one.
	mkVolume := func(name string, labels map[string]string) {
		t.Helper()
		if _, err := c.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	ours := map[string]string{providers.LabelCluster: o.Cluster}
	mkVolume(o.NamePrefix+"workers-vol02-containerd", ours)
	if err := p.Delete(ctx, providerid.Format(o.NamePrefix+"workers-vol02")); err != nil {
		t.Fatal(err)
	}
	if !volumeGone(t, c, o.NamePrefix+"workers-vol02-containerd") {
		t.Error("Delete of a machine without a container left its volume")
	}
	mkVolume(o.NamePrefix+"workers-vol03-containerd", ours)
	removed, err := p.Cleanup(ctx)
	if err != nil || !slices.Contains(removed, "volume "+o.NamePrefix+"workers-vol03-containerd") {
		t.Errorf("Cleanup = %v, %v; want the orphan volume removed", removed, err)
	}
	// A volume of the machine's name that another cluster labelled is left alone.
	foreignVol := o.NamePrefix + "workers-vol04-containerd"
	mkVolume(foreignVol, map[string]string{providers.LabelCluster: "someone-else"})
	t.Cleanup(func() { _ = c.VolumeRemove(context.Background(), foreignVol, true) })
	if err := p.Delete(ctx, providerid.Format(o.NamePrefix+"workers-vol04")); err == nil || !strings.Contains(err.Error(), "not the cluster's") {
		t.Errorf("Delete with a foreign volume of its name = %v, want a refusal naming it", err)
	}
	if volumeGone(t, c, foreignVol) {
		t.Error("a foreign volume was removed")
	}

	// The foreign container has an anonymous volume too: the test's own
	// cleanup must not leak it (this check runs after that cleanup).
	var foreignVols []string
	t.Cleanup(func() {
		for _, v := range foreignVols {
			if !volumeGone(t, c, v) {
				t.Errorf("the foreign container's volume %s was left", v)
				_ = c.VolumeRemove(context.Background(), v, true)
			}
		}
	})
	foreignContainer(t, c, o.BaseImage, o.NamePrefix+"someone-else")
	if fi, err := c.ContainerInspect(ctx, o.NamePrefix+"someone-else"); err == nil {
		for _, m := range fi.Mounts {
			if m.Type == "volume" {
				foreignVols = append(foreignVols, m.Name)
			}
		}
	}
	err = p.Delete(ctx, providerid.Format(o.NamePrefix+"someone-else"))
	if err == nil || !strings.Contains(err.Error(), "not owned by this cluster") {
		t.Errorf("Delete of a foreign container = %v, want a refusal", err)
	}
	if _, err := c.ContainerInspect(ctx, o.NamePrefix+"someone-else"); err != nil {
		t.Errorf("the foreign container was touched: %v", err)
	}
	if err := p.Delete(ctx, "kwok://x"); err == nil {
		t.Error("Delete of another provider's id succeeded")
	}
}

// TestListShowsAStoppedMachineAsFailed: a container that exited is a
// machine that halted; List says so with an error the core reports.
func TestListShowsAStoppedMachineAsFailed(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	o := testOptions(t, sleeperImage(t, c))
	p := newTestProvider(t, o)
	ctx := context.Background()
	if _, err := p.Create(ctx, request("workers-stop1")); err != nil {
		t.Fatal(err)
	}
	timeout := 10
	if err := c.ContainerStop(ctx, o.NamePrefix+"workers-stop1", container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	listed, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Error == nil || listed[0].Error.Code != "container_exited" || !strings.Contains(listed[0].Error.Message, "Exited") {
		t.Fatalf("List = %+v, want the machine with a container_exited error", listed)
	}
}

// TestZonesAreNetworks: a zone's network is made on first use and shared by
// its machines; each zone has its own; Cleanup removes a network only once
// it is empty, and never one that is not ours. A network of our name that
// is not ours is an error naming it.
func TestZonesAreNetworks(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	o := testOptions(t, sleeperImage(t, c))
	p := newTestProvider(t, o)
	ctx := context.Background()
	a := request("workers-zone1")
	b := request("workers-zone2")
	b.Location = "zone-b"
	var ins []providers.Instance
	for _, r := range []providers.CreateRequest{a, b} {
		in, err := p.Create(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	nets := func() []string {
		ns, err := c.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", providers.LabelCluster+"="+o.Cluster))})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range ns {
			names = append(names, n.Name)
		}
		slices.Sort(names)
		return names
	}
	both := []string{"prebake-" + o.Cluster + "-zone-a", "prebake-" + o.Cluster + "-zone-b"}
	if d := cmp.Diff(both, nets()); d != "" {
		t.Fatalf("networks (-want +got):\n%s", d)
	}
	// Only networks count here: Cleanup's other removals have their own tests.
	networksRemoved := func() []string {
		t.Helper()
		removed, err := p.Cleanup(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(removed, func(r string) bool { return !strings.HasPrefix(r, "network ") })
	}
	if removed := networksRemoved(); len(removed) != 0 {
		t.Fatalf("Cleanup with both zones in use removed %v", removed)
	}
	if err := p.Delete(ctx, ins[1].ProviderID); err != nil {
		t.Fatal(err)
	}
	if removed := networksRemoved(); len(removed) != 1 || removed[0] != "network "+both[1] {
		t.Fatalf("Cleanup after zone-b emptied removed %v, want only %s", removed, both[1])
	}
	if d := cmp.Diff(both[:1], nets()); d != "" {
		t.Fatalf("networks after Cleanup (-want +got):\n%s", d)
	}
	// A later Create in zone-b makes its network again.
	b.Name = "workers-zone3"
	if _, err := p.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(both, nets()); d != "" {
		t.Fatalf("networks after a new zone-b machine (-want +got):\n%s", d)
	}

	// Someone else's network under our zone's name.
	taken := "prebake-" + o.Cluster + "-zone-x"
	resp, err := c.NetworkCreate(ctx, taken, network.CreateOptions{Labels: map[string]string{labelTest: "foreign"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.NetworkRemove(context.Background(), resp.ID) })
	x := request("workers-zonex")
	x.Location = "zone-x"
	_, err = p.Create(ctx, x)
	if cl := p.Classify(err); err == nil || cl.Code != "network_conflict" || !strings.Contains(err.Error(), taken) {
		t.Fatalf("Create in a zone whose network name is taken = %v (%+v)", err, cl)
	}
	if _, err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NetworkInspect(ctx, resp.ID, network.InspectOptions{}); err != nil {
		t.Errorf("Cleanup touched a network that is not ours: %v", err)
	}
}

// TestZoneCapacity: a zone takes at most its capacity of machines; a retry
// of a machine already there still answers; other zones are not limited.
func TestZoneCapacity(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	o := testOptions(t, sleeperImage(t, c))
	o.Capacity = map[string]int{"zone-a": 2}
	p := newTestProvider(t, o)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = p.Create(ctx, request(fmt.Sprintf("workers-cap%d", i))) })
	}
	wg.Wait()
	full := 0
	for _, err := range errs {
		if err == nil {
			continue
		}
		if cl := p.Classify(err); cl.Class != providers.ErrorOutOfResources || cl.Code != "resource_unavailable" || cl.Retryable {
			t.Errorf("Classify(%v) = %+v", err, cl)
		}
		full++
	}
	if full != 2 {
		t.Fatalf("%d of 4 parallel Creates in a zone of 2 failed (%v), want 2", full, errs)
	}
	for i, err := range errs {
		if err == nil {
			if _, err := p.Create(ctx, request(fmt.Sprintf("workers-cap%d", i))); err != nil {
				t.Errorf("retry of a machine in a full zone: %v", err)
			}
		}
	}
	other := request("workers-capb")
	other.Location = "zone-b"
	if _, err := p.Create(ctx, other); err != nil {
		t.Errorf("Create in an unlimited zone: %v", err)
	}
}

// TestAPIVersionNegotiated: the client speaks the engine's API version
// (1.41 on Docker 20.10), not its own newer one.
func TestAPIVersionNegotiated(t *testing.T) {
	t.Parallel()
	c := requireEngine(t)
	p := newTestProvider(t, testOptions(t, "unused:base"))
	if _, err := p.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	v, err := c.ServerVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := client.NewClientWithOpts()
	if err != nil {
		t.Fatal(err)
	}
	want := v.APIVersion
	if max := fresh.ClientVersion(); versionLess(max, want) {
		want = max
	}
	if got := p.APIVersion(); got != want {
		t.Errorf("API version %s, want %s (engine %s, client's newest %s)", got, want, v.APIVersion, fresh.ClientVersion())
	}
}

// capNames strips the CAP_ prefix that the engine adds to what it was
// given.
func capNames(caps []string) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		out = append(out, strings.TrimPrefix(c, "CAP_"))
	}
	return out
}

// versionLess compares API versions such as 1.41 and 1.51.
func versionLess(a, b string) bool {
	var am, an, bm, bn int
	_, _ = fmt.Sscanf(a, "%d.%d", &am, &an)
	_, _ = fmt.Sscanf(b, "%d.%d", &bm, &bn)
	return am < bm || am == bm && an < bn
}
