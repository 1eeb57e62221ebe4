package docker

// The tests' Docker engine: what they need of it, the tiny image they boot,
// and the cleanup of everything they make. Every object a test makes is
// labelled or named for this package's tests (cluster names and image
// repositories start with "pbt-"), removed when the test ends, also when it
// fails, and swept at the next run if a killed run left it (after an hour,
// so a concurrent run's objects are left alone).

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker/baseimage"
)

// testPrefix starts every cluster name and image repository the tests make.
const testPrefix = "pbt-"

// labelTest marks the objects a test makes itself (not through the
// provider): images and foreign containers.
const labelTest = "prebake.dev/test"

var (
	engineOnce sync.Once
	engineErr  error
	rawClient  *client.Client
	runID      = randomHex(3)
	clusterSeq atomic.Int64
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// requireEngine skips the test with one line when no Docker engine answers,
// except under CI=true, where that fails it. It returns a raw client for
// the test's own checks.
func requireEngine(t testing.TB) *client.Client {
	t.Helper()
	engineOnce.Do(func() {
		c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			engineErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Ping(ctx); err != nil {
			engineErr = err
			return
		}
		rawClient = c
		sweep(c)
	})
	if engineErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker provider test needs a Docker engine, and CI=true makes a missing one a failure: %v", engineErr)
		}
		t.Skipf("skipping docker provider test: no Docker engine (%v)", firstLine(engineErr.Error()))
	}
	return rawClient
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// sweep removes what a killed earlier run left: objects of the tests more
// than an hour old.
func sweep(c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := time.Now().Add(-time.Hour)
	cs, _ := c.ContainerList(ctx, container.ListOptions{All: true})
	for _, ct := range cs {
		if time.Unix(ct.Created, 0).After(old) {
			continue
		}
		if strings.HasPrefix(ct.Labels[providers.LabelCluster], testPrefix) || ct.Labels[labelTest] != "" {
			_ = c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	}
	nets, _ := c.NetworkList(ctx, network.ListOptions{})
	for _, n := range nets {
		if n.Created.Before(old) && strings.HasPrefix(n.Name, "prebake-"+testPrefix) {
			_ = c.NetworkRemove(ctx, n.ID)
		}
	}
	vols, _ := c.VolumeList(ctx, volume.ListOptions{})
	for _, v := range vols.Volumes {
		created, err := time.Parse(time.RFC3339, v.CreatedAt)
		if err == nil && created.Before(old) && (strings.HasPrefix(v.Labels[providers.LabelCluster], testPrefix) || strings.HasPrefix(v.Name, testPrefix)) {
			_ = c.VolumeRemove(ctx, v.Name, true)
		}
	}
	ims, _ := c.ImageList(ctx, image.ListOptions{All: true})
	for _, im := range ims {
		if time.Unix(im.Created, 0).After(old) {
			continue
		}
		for _, ref := range im.RepoTags {
			if strings.HasPrefix(ref, testPrefix) {
				_, _ = c.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
			}
		}
	}
}

// sleeperSource is the tests' prebake-container-init (baseimage.InitPath): it sleeps until it is told to
// stop (systemd's SIGRTMIN+3 among the signals). It also stands in for
// cloud-init where a test needs it: user-data that starts with
// "#prebake-test-report" has the rest written, a moment after boot, where
// bootstrap's seal step writes a builder's report, and a file into
// containerd's root (the volume), as a builder's pulled images; user-data
// that starts with "#prebake-test-status" has the rest written where the
// node script writes its status (a warm-pool standby's "prepared").
const sleeperSource = `package main

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.Signal(34+3))
	if ud, err := os.ReadFile("/var/lib/cloud/seed/nocloud/user-data"); err == nil {
		if rest, ok := strings.CutPrefix(string(ud), "#prebake-test-report\n"); ok {
			go func() {
				time.Sleep(1200 * time.Millisecond)
				_ = os.MkdirAll("/var/lib/prebake", 0o755)
				_ = os.WriteFile("/var/lib/prebake/build-report.json.tmp", []byte(rest), 0o644)
				_ = os.Rename("/var/lib/prebake/build-report.json.tmp", "/var/lib/prebake/build-report.json")
				// What the builder's containerd would hold (its pod images), on its volume.
				_ = os.WriteFile("/var/lib/containerd/prebake-test-content", []byte("baked\n"), 0o644)
			}()
		}
		if rest, ok := strings.CutPrefix(string(ud), "#prebake-test-status\n"); ok {
			go func() {
				time.Sleep(500 * time.Millisecond)
				_ = os.MkdirAll("/var/lib/prebake", 0o755)
				_ = os.WriteFile("/var/lib/prebake/bootstrap-status.json", []byte(rest), 0o644)
			}()
		}
	}
	<-stop
}
`

var (
	sleeperOnce sync.Once
	sleeperBin  []byte
	sleeperErr  error
)

// sleeper returns the static sleeper binary, built once per run.
func sleeper(t testing.TB) []byte {
	t.Helper()
	sleeperOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pbt-sleeper")
		if err != nil {
			sleeperErr = err
			return
		}
		defer os.RemoveAll(dir)
		for name, body := range map[string]string{"main.go": sleeperSource, "go.mod": "module sleeper\n\ngo 1.26\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				sleeperErr = err
				return
			}
		}
		cmd := exec.Command("go", "build", "-trimpath", "-o", "init", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			sleeperErr = fmt.Errorf("go build the sleeper: %v\n%s", err, out)
			return
		}
		sleeperBin, sleeperErr = os.ReadFile(filepath.Join(dir, "init"))
	})
	if sleeperErr != nil {
		t.Fatal(sleeperErr)
	}
	return sleeperBin
}

// tarFile is one entry of an image's root filesystem.
type tarFile struct {
	name string
	mode int64
	body []byte
	dir  bool
}

// importImage makes an image tagged ref from files (with the given
// Dockerfile changes) and removes it when t ends.
func importImage(t testing.TB, c *client.Client, ref string, files []tarFile, changes ...string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), ModTime: time.Now(), Typeflag: tar.TypeReg}
		if f.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	changes = append(changes, fmt.Sprintf("LABEL %q=%q", labelTest, "providers-docker"))
	ctx := context.Background()
	rc, err := c.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{Changes: changes})
	if err == nil {
		err = readStream(rc)
	}
	if err != nil {
		t.Fatalf("import test image %s: %v", ref, err)
	}
	t.Cleanup(func() { removeImage(t, c, ref) })
}

func removeImage(t testing.TB, c *client.Client, ref string) {
	t.Helper()
	_, err := c.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Errorf("remove test image %s: %v", ref, err)
	}
}

// sleeperImage makes an image whose baseimage.InitPath is the sleeper, tagged for
// t alone.
func sleeperImage(t testing.TB, c *client.Client, changes ...string) string {
	t.Helper()
	ref := fmt.Sprintf("%simg-%s-%d:sleeper", testPrefix, runID, clusterSeq.Add(1))
	importImage(t, c, ref, []tarFile{{name: "usr/", mode: 0o755, dir: true}, {name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/sbin/", mode: 0o755, dir: true}, {name: strings.TrimPrefix(baseimage.InitPath, "/"), mode: 0o755, body: sleeper(t)}}, changes...)
	return ref
}

// testMachineType fits on any host the tests run on.
var testMachineType = providers.MachineType{Name: "docker-test", MilliCPU: 500, MemoryBytes: 256 << 20, Pods: 20, Arch: hostArch()}

// testOptions are the options of a provider for t: a cluster of its own,
// whose containers' names start with the cluster name, and an image
// repository of its own.
func testOptions(t testing.TB, base string) Options {
	t.Helper()
	cluster := fmt.Sprintf("%s%s-%d", testPrefix, runID, clusterSeq.Add(1))
	return Options{
		Cluster: cluster, BaseImage: base, NamePrefix: cluster + "-",
		ImageRepository: cluster + "-node",
		MachineTypes:    []providers.MachineType{testMachineType},
	}
}

// newTestProvider builds a provider from o and, when t ends, removes
// everything of o's cluster and repository and checks that nothing is
// left.
func newTestProvider(t testing.TB, o Options) *Provider {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	c := requireEngine(t)
	t.Cleanup(func() {
		defer p.Close()
		cleanCluster(t, c, o)
	})
	return p
}

// cleanCluster removes every container, network and image of o's cluster
// and repository, then fails t if any is still there.
func cleanCluster(t testing.TB, c *client.Client, o Options) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	byCluster := filters.NewArgs(filters.Arg("label", providers.LabelCluster+"="+o.Cluster))
	cs, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: byCluster})
	if err != nil {
		t.Errorf("cleanup: list containers: %v", err)
	}
	for _, ct := range cs {
		if err := c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: remove container %v: %v", ct.Names, err)
		}
	}
	// Builders carry no cluster label, but their names start with it.
	all, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", o.NamePrefix))})
	for _, ct := range all {
		_ = c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
	nets, err := c.NetworkList(ctx, network.ListOptions{Filters: byCluster})
	if err != nil {
		t.Errorf("cleanup: list networks: %v", err)
	}
	for _, n := range nets {
		if err := c.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: remove network %s: %v", n.Name, err)
		}
	}
	for _, repo := range []string{o.ImageRepository, o.ImageRepository + "-labels"} {
		ims, _ := c.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", repo))})
		for _, im := range ims {
			for _, ref := range im.RepoTags {
				_, _ = c.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
			}
		}
	}
	// Replaced label records are untagged: only their label names the repository.
	replaced, _ := c.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("dangling", "true"), filters.Arg("label", LabelLabelsRepository+"="+o.ImageRepository))})
	for _, im := range replaced {
		_, _ = c.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	}
	// What is left is a leak.
	if left, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: byCluster}); len(left) > 0 {
		t.Errorf("cleanup: %d containers of cluster %s left", len(left), o.Cluster)
	}
	if left, _ := c.NetworkList(ctx, network.ListOptions{Filters: byCluster}); len(left) > 0 {
		t.Errorf("cleanup: %d networks of cluster %s left", len(left), o.Cluster)
	}
	// The containerd volumes of the machines the test left (the provider's Delete removes
	// them; tests that check that do so themselves) and of builders, by name.
	vols, err := c.VolumeList(ctx, volume.ListOptions{})
	if err != nil {
		t.Errorf("cleanup: list volumes: %v", err)
	}
	for _, v := range vols.Volumes {
		if v.Labels[providers.LabelCluster] == o.Cluster || strings.HasPrefix(v.Name, o.NamePrefix) {
			if err := c.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("cleanup: remove volume %s: %v", v.Name, err)
			}
		}
	}
}

// volumeGone reports whether the named volume no longer exists.
func volumeGone(t testing.TB, c *client.Client, name string) bool {
	t.Helper()
	_, err := c.VolumeInspect(context.Background(), name)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect volume %s: %v", name, err)
	}
	return cerrdefs.IsNotFound(err)
}
