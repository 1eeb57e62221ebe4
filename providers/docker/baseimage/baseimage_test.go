package baseimage

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeEngine holds images by ref and records imports.
type fakeEngine struct {
	images  map[string]image.InspectResponse
	imports []fakeImport
	reply   string // the import's JSON stream
}

type fakeImport struct {
	ref     string
	body    string
	changes []string
}

type notFound struct{}

func (notFound) Error() string { return "No such image" }
func (notFound) NotFound()     {}

func (f *fakeEngine) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	ins, ok := f.images[ref]
	if !ok {
		return image.InspectResponse{}, notFound{}
	}
	return ins, nil
}

func (f *fakeEngine) ImageImport(_ context.Context, src image.ImportSource, ref string, opts image.ImportOptions) (io.ReadCloser, error) {
	body, err := io.ReadAll(src.Source)
	if err != nil {
		return nil, err
	}
	f.imports = append(f.imports, fakeImport{ref: ref, body: string(body), changes: opts.Changes})
	reply := f.reply
	if reply == "" {
		reply = `{"status":"sha256:0123"}` + "\n"
		f.images[ref] = inspect("sha256:new", labelOf(opts.Changes), time.Now())
	}
	return io.NopCloser(strings.NewReader(reply)), nil
}

// labelOf is the inputs-hash label an import's changes set.
func labelOf(changes []string) string {
	for _, c := range changes {
		if v, ok := strings.CutPrefix(c, "LABEL "+LabelInputsHash+"="); ok {
			return v
		}
	}
	return ""
}

func inspect(id, hash string, created time.Time) image.InspectResponse {
	return image.InspectResponse{ID: id, Created: created.Format(time.RFC3339Nano),
		Config: &dockerspec.DockerOCIImageConfig{ImageConfig: ocispec.ImageConfig{Labels: map[string]string{LabelInputsHash: hash}}}}
}

func newEngine() *fakeEngine { return &fakeEngine{images: map[string]image.InspectResponse{}} }

func opts(t *testing.T) Options {
	return Options{CacheDir: t.TempDir(), Mirror: "http://mirror.invalid/debian", Out: io.Discard}
}

// writeTarball puts a fresh cached tarball where Ensure looks, so no debootstrap runs.
func writeTarball(t *testing.T, o Options, content string, mtime time.Time) string {
	t.Helper()
	p := filepath.Join(o.CacheDir, Suite+"-"+InputsHash(o.Mirror)[:12]+".tar")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEnsureReusesTheImageWithTheSameInputs(t *testing.T) {
	o := opts(t)
	e := newEngine()
	hash := InputsHash(o.Mirror)
	e.images[RefFor(hash)] = inspect("sha256:have", hash, time.Now().Add(-time.Hour))
	img, err := Ensure(context.Background(), e, o)
	if err != nil {
		t.Fatal(err)
	}
	if img.ID != "sha256:have" || img.Imported || img.Built || len(e.imports) != 0 {
		t.Errorf("Ensure = %+v with %d imports, want the existing image and no import", img, len(e.imports))
	}
}

func TestEnsureImportsTheCachedTarball(t *testing.T) {
	o := opts(t)
	e := newEngine()
	writeTarball(t, o, "a tarball", time.Now())
	hash := InputsHash(o.Mirror)
	// An image under the same tag made from other inputs is replaced, not reused.
	e.images[RefFor(hash)] = inspect("sha256:other", "another-hash", time.Now())
	img, err := Ensure(context.Background(), e, o)
	if err != nil {
		t.Fatal(err)
	}
	if !img.Imported || img.Built || img.ID != "sha256:new" || img.Ref != RefFor(hash) {
		t.Errorf("Ensure = %+v, want imported from the tarball under %s", img, RefFor(hash))
	}
	if len(e.imports) != 1 || e.imports[0].body != "a tarball" {
		t.Fatalf("imports = %+v, want the tarball once", e.imports)
	}
	ch := e.imports[0].changes
	for _, want := range []string{`ENTRYPOINT ["` + InitPath + `"]`, "ENV container=docker", "LABEL " + LabelInputsHash + "=" + hash} {
		if !slices.Contains(ch, want) {
			t.Errorf("import changes %q lack %q", ch, want)
		}
	}
}

func TestEnsureReimportsAnImageOlderThanMaxAge(t *testing.T) {
	o := opts(t)
	o.MaxAge = time.Hour
	e := newEngine()
	writeTarball(t, o, "fresh", time.Now())
	hash := InputsHash(o.Mirror)
	e.images[RefFor(hash)] = inspect("sha256:old", hash, time.Now().Add(-2*time.Hour))
	img, err := Ensure(context.Background(), e, o)
	if err != nil {
		t.Fatal(err)
	}
	if !img.Imported || len(e.imports) != 1 {
		t.Errorf("Ensure = %+v, imports %d: an image past MaxAge must be imported again", img, len(e.imports))
	}
}

func TestEnsureReportsTheEnginesImportError(t *testing.T) {
	o := opts(t)
	e := newEngine()
	e.reply = `{"status":"Importing"}` + "\n" + `{"errorDetail":{"message":"no space left on device"},"error":"no space left on device"}` + "\n"
	writeTarball(t, o, "x", time.Now())
	_, err := Ensure(context.Background(), e, o)
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("Ensure error = %v, want the engine's message", err)
	}
}

func TestEnsureWithoutPrerequisitesSaysWhat(t *testing.T) {
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("debootstrap"); err == nil {
			t.Skip("this machine has every prerequisite; nothing to report")
		}
	}
	o := opts(t)
	_, err := Ensure(context.Background(), newEngine(), o)
	if !errors.Is(err, ErrPrerequisite) {
		t.Fatalf("Ensure error = %v, want ErrPrerequisite", err)
	}
	if m, _ := filepath.Glob(filepath.Join(o.CacheDir, "*.tar")); len(m) != 0 {
		t.Errorf("a failed build left %v", m)
	}
}

func TestInputsHashAndRef(t *testing.T) {
	a, b := InputsHash("http://a/debian"), InputsHash("http://b/debian")
	if a == b || len(a) != 64 {
		t.Errorf("InputsHash: %q and %q; want 64 hex digits that differ by mirror", a, b)
	}
	ref := RefFor(a)
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		t.Errorf("RefFor = %q, not an image reference: %v", ref, err)
	}
	if !strings.HasPrefix(ref, Repository+":"+Suite+"-") {
		t.Errorf("RefFor = %q", ref)
	}
}

func TestCustomise(t *testing.T) {
	root := t.TempDir()
	for _, rel := range []string{"etc/machine-id", "var/lib/dbus/machine-id", "etc/resolv.conf", "usr/sbin/policy-rc.d"} {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("host data\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := customise(root); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/machine-id")); err != nil || len(b) != 0 {
		t.Errorf("machine-id = %q, %v; want empty", b, err)
	}
	for _, rel := range []string{"var/lib/dbus/machine-id", "etc/resolv.conf", "usr/sbin/policy-rc.d"} {
		if _, err := os.Stat(filepath.Join(root, rel)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there (%v)", rel, err)
		}
	}
	st, err := os.Stat(filepath.Join(root, InitPath))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("init script: %v %v, want mode 0755", st, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, CloudConfigPath)); !strings.Contains(string(b), "datasource_list: [NoCloud, None]") {
		t.Errorf("cloud-init config = %q, want NoCloud only", b)
	}
}

func TestContainerInitIsValidShell(t *testing.T) {
	p := filepath.Join(t.TempDir(), "init.sh")
	if err := os.WriteFile(p, []byte(containerInit), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	if !strings.Contains(containerInit, "exec /sbin/init") {
		t.Error("container-init.sh must exec systemd as PID 1")
	}
}

func TestNodeContainer(t *testing.T) {
	cfg, host, net := NodeContainer(NodeSpec{Name: "n1", Image: "img", Network: "netw", Volume: "n1-containerd",
		Labels: map[string]string{"prebake.dev/cluster": "c"}, NanoCPUs: 2e9, MemoryBytes: 1 << 30, Aliases: []string{"n1"}})
	if cfg.Hostname != "n1" || cfg.Image != "img" || cfg.StopSignal != "SIGRTMIN+3" || cfg.Labels["prebake.dev/cluster"] != "c" {
		t.Errorf("config = %+v", cfg)
	}
	if !slices.Equal(cfg.Entrypoint, []string{InitPath}) || len(cfg.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want %s alone", cfg.Entrypoint, cfg.Cmd, InitPath)
	}
	if host.MemorySwap != 1<<30 {
		t.Errorf("memory swap %d, want the memory limit (no swap)", host.MemorySwap)
	}
	if host.Privileged || !slices.Equal(host.CapDrop, []string{"SYS_RESOURCE"}) || !host.CgroupnsMode.IsPrivate() {
		t.Errorf("host config: privileged %v, cap drop %v, cgroupns %q: want unprivileged, SYS_RESOURCE dropped, private",
			host.Privileged, host.CapDrop, host.CgroupnsMode)
	}
	if host.Tmpfs["/run"] != "rw,exec" || host.Tmpfs["/tmp"] != "rw,exec" {
		t.Errorf("tmpfs = %v, want /run and /tmp executable", host.Tmpfs)
	}
	if len(host.Mounts) != 1 || host.Mounts[0].Source != "n1-containerd" || host.Mounts[0].Target != ContainerdDir {
		t.Errorf("mounts = %+v, want the volume at %s", host.Mounts, ContainerdDir)
	}
	if len(host.Devices) != 1 || host.Devices[0].PathOnHost != "/dev/kmsg" {
		t.Errorf("devices = %+v, want /dev/kmsg", host.Devices)
	}
	if host.NanoCPUs != 2e9 || host.Memory != 1<<30 || host.Sysctls["net.ipv4.ip_forward"] != "1" {
		t.Errorf("resources/sysctls = %d %d %v", host.NanoCPUs, host.Memory, host.Sysctls)
	}
	if ep, ok := net.EndpointsConfig["netw"]; !ok || !slices.Equal(ep.Aliases, []string{"n1"}) {
		t.Errorf("networking = %+v, want netw with alias n1", net)
	}
}
