//go:build system

package registry

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/internal/kubetest/spawn"
)

// missing skips t with one line, or fails it under CI=true.
func missing(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("system test prerequisite missing under CI=true: %s", what)
	}
	t.Skipf("skipping system test: %s", what)
}

func requireCommands(t *testing.T, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			missing(t, c+" not found (apt-get install containerd runc util-linux)")
		}
	}
}

// TestContainerdConfigDump feeds bootstrap-style runc tables plus ContainerdCRIConfig's
// lines to the machine's containerd (Debian bookworm: 1.6.20) and checks that containerd
// parses them and reports the sandbox image and config_path it would use.
func TestContainerdConfigDump(t *testing.T) {
	requireCommands(t, "containerd")
	lines, err := ContainerdCRIConfig("172.18.0.1:5000/prebake/pause:1", "/etc/containerd/certs.d")
	if err != nil {
		t.Fatal(err)
	}
	cfg := `version = 2

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true

` + lines
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("containerd", "--config", path, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, out)
	}
	for _, want := range []string{
		`sandbox_image = "172.18.0.1:5000/prebake/pause:1"`,
		`config_path = "/etc/containerd/certs.d"`,
		`SystemdCgroup = true`,
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("containerd's dump of the config lacks %s:\n%s", want, out)
		}
	}
}

// privateContainerd is a containerd of its own (root, state, socket under a temp dir; no
// CRI plugin), so the test touches no containerd of the machine.
type privateContainerd struct {
	dir, sock string
	cmd       *exec.Cmd
	done      chan struct{}
}

func startContainerd(t *testing.T, sp *spawn.Spawner) *privateContainerd {
	t.Helper()
	// A short path: containerd's sockets must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "pbctd")
	if err != nil {
		t.Fatal(err)
	}
	c := &privateContainerd{dir: dir, sock: filepath.Join(dir, "c.sock"), done: make(chan struct{})}
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, filepath.Join(dir, "opt"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	c.cmd = exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := sp.Start(c.cmd); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			t.Logf("containerd log ends:\n%s", strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove containerd dir: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.ctr(context.Background(), "version"); err == nil {
			return c
		}
		select {
		case <-c.done:
			t.Fatal("containerd exited at start")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd did not answer within 30s")
		}
		time.Sleep(100 * time.Millisecond) // polling the socket: there is nothing to wait on
	}
}

// ctr runs ctr against the private containerd in the k8s.io namespace (the kubelet's).
func (c *privateContainerd) ctr(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// imageDigests maps image names to their target digests, from `ctr images ls`.
func (c *privateContainerd) imageDigests(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	out, err := c.ctr(ctx, "images", "ls")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 3 {
			m[f[0]] = f[2]
		}
	}
	return m
}

// TestContainerdPullsAndImports proves, with the machine's containerd 1.6 and a private
// daemon: (1) the rendered hosts.toml is what lets containerd pull from the plain-HTTP
// registry under a non-localhost name (without it the same pull fails); (2) the pulled
// image keeps the pushed digest; (3) the OCI archive imports with `ctr -n k8s.io images
// import` while the registry is stopped, under both names and the registry's digests;
// (4) the imported images run: busybox prints, pause exits 0 on SIGTERM.
//
// The registry listens on 127.0.0.1, which containerd treats as plain HTTP anyway, so the
// pulls name it prebake-registry.test:<port>, resolved by an /etc/hosts that is bind-mounted
// only in a private mount namespace of the ctr process (ctr does the fetching itself).
func TestContainerdPullsAndImports(t *testing.T) {
	if os.Geteuid() != 0 {
		missing(t, "not root (containerd and mount namespaces need root)")
	}
	requireCommands(t, "containerd", "ctr", "runc", "unshare", "mount")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	set, err := BuildImages(ctx, BuildOptions{Out: TestLog{t}}, LargeOptions{Size: 4 << 20, Layers: 2})
	SkipIfUnavailable(t, err)
	srv := StartTest(ctx, t, "127.0.0.1:0")
	pushed, err := PushAll(ctx, srv.Host(), set.All()...)
	if err != nil {
		t.Fatal(err)
	}
	sp := spawn.New()
	defer sp.Close()
	ctd := startContainerd(t, sp)

	_, port, _ := net.SplitHostPort(srv.Host())
	name := "prebake-registry.test:" + port
	work := t.TempDir()
	hostsFile := filepath.Join(work, "hosts")
	if err := os.WriteFile(hostsFile, []byte("127.0.0.1 localhost\n127.0.0.1 prebake-registry.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := name + "/" + set.Workload.Repository + ":" + set.Workload.Tag
	pull := func(certsDir string) (string, error) {
		script := `mount --bind "$1" /etc/hosts && shift && exec "$@"`
		args := []string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", hostsFile,
			"ctr", "--address", ctd.sock, "-n", "k8s.io", "images", "pull", "--hosts-dir", certsDir, "--snapshotter", "native", ref}
		out, err := exec.CommandContext(ctx, "unshare", args...).CombinedOutput()
		return string(out), err
	}

	// Without a host config, containerd speaks HTTPS to a non-localhost registry.
	emptyDir := filepath.Join(work, "empty-certs.d")
	if err := os.MkdirAll(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := pull(emptyDir); err == nil || !strings.Contains(out, "HTTP response to HTTPS client") {
		t.Fatalf("pull without hosts.toml: err %v, want an HTTPS-to-HTTP failure; output:\n%s", err, out)
	}

	certsDir := filepath.Join(work, "certs.d")
	hosts, err := HostsTOML(certsDir, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(hosts.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hosts.Path, []byte(hosts.Content), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := pull(certsDir); err != nil {
		t.Fatalf("pull with the rendered hosts.toml: %v\n%s", err, out)
	}
	if got := ctd.imageDigests(ctx, t)[ref]; got != pushed[1].Digest {
		t.Errorf("pulled %s has digest %q, pushed %s", ref, got, pushed[1].Digest)
	}

	// Baking: the archive imports with the registry gone.
	archive := filepath.Join(work, "images.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(f, srv.Host(), set.All()...); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := ctd.ctr(ctx, "images", "import", "--snapshotter", "native", archive); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	got := ctd.imageDigests(ctx, t)
	for _, p := range pushed {
		if got[p.Ref] != p.Digest || got[p.ByDigest] != p.Digest {
			t.Errorf("after import: %s -> %q, %s -> %q; want both %s", p.Ref, got[p.Ref], p.ByDigest, got[p.ByDigest], p.Digest)
		}
	}

	// The images run. --cgroup "": runc then makes a cgroup named after the container and
	// removes it with the container, where ctr's default (/k8s.io/<id>) would leave an empty
	// k8s.io cgroup on the machine.
	id := fmt.Sprintf("pbtest-%d", os.Getpid())
	out, err := ctd.ctr(ctx, "run", "--rm", "--cgroup", "", "--snapshotter", "native", pushed[1].Ref, id+"-bb", "sh", "-c", "echo hello from $(busybox | head -1 | cut -d' ' -f1-2)")
	if err != nil || !strings.Contains(out, "hello from BusyBox v1.") {
		t.Errorf("ctr run busybox: %v\n%s", err, out)
	}
	pauseRun := exec.CommandContext(ctx, "ctr", "--address", ctd.sock, "-n", "k8s.io", "run", "--rm", "--cgroup", "", "--snapshotter", "native", pushed[0].Ref, id+"-pause")
	var pauseOut bytes.Buffer
	pauseRun.Stdout, pauseRun.Stderr = &pauseOut, &pauseOut
	if err := sp.Start(pauseRun); err != nil {
		t.Fatal(err)
	}
	pauseDone := make(chan error, 1)
	go func() { pauseDone <- pauseRun.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := ctd.ctr(ctx, "tasks", "ls")
		if strings.Contains(out, id+"-pause") && strings.Contains(out, "RUNNING") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pause task is not RUNNING after 60s:\n%s\n%s", out, pauseOut.String())
		}
		time.Sleep(100 * time.Millisecond) // polling containerd's task list
	}
	select {
	case err := <-pauseDone:
		t.Fatalf("pause exited before SIGTERM: %v\n%s", err, pauseOut.String())
	default:
	}
	if out, err := ctd.ctr(ctx, "tasks", "kill", "--signal", "SIGTERM", id+"-pause"); err != nil {
		t.Fatalf("ctr tasks kill: %v\n%s", err, out)
	}
	select {
	case err := <-pauseDone:
		if err != nil {
			t.Errorf("pause after SIGTERM: %v (want exit status 0)\n%s", err, pauseOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("pause still running 30s after SIGTERM\n%s", pauseOut.String())
		_, _ = ctd.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id+"-pause")
		<-pauseDone
	}
}
