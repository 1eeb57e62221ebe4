//go:build e2e

package realnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/providers/docker/baseimage"
)

// missingPrereq skips the test with one line, or fails it under CI=true, where a skipped
// real-node test would hide a broken runner.
func missingPrereq(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("real-node test prerequisite missing under CI=true: %s", what)
	}
	t.Skipf("skipping real-node test: %s", what)
}

// aptComponents are the Debian packages of a kubeadm node the base image lacks; their
// versions are what the image's package lists offer.
var aptComponents = []string{"containerd", "runc", "conntrack", "socat", "ethtool", "iptables", "ebtables"}

// env is one run's world: a Docker network, the hermetic control plane listening on its
// gateway, a file server there with the node binaries, and the base image.
type env struct {
	t       *testing.T
	name    string
	engine  *engine
	network string
	gateway string
	cluster *kubetest.Hermetic
	kube    kubernetes.Interface
	image   baseimage.Image
	comps   []bootstrap.Component
	caHash  string
	api     string
}

func setup(ctx context.Context, t *testing.T, name string) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		missingPrereq(t, "not root (the base image is made with debootstrap)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		missingPrereq(t, "the go command is not on PATH (needed to build the control plane and node binaries)")
	}
	e := &env{t: t, name: name, engine: newEngine(t, name), network: name}

	img, err := baseimage.Ensure(ctx, e.engine.c, baseimage.Options{Out: kubetest.TestLog{T: t}})
	if errors.Is(err, baseimage.ErrPrerequisite) {
		missingPrereq(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	e.image = img
	if img.Imported {
		// The tarball is the cache; the image is this test's (the next one imports it again
		// in seconds), so it leaves nothing in the engine.
		e.engine.images = append(e.engine.images, img.ID)
	}

	build := kubetest.BuildOptions{Out: kubetest.TestLog{T: t}}
	bins, err := kubetest.Build(ctx, build)
	kubetest.SkipIfUnavailable(t, err)
	nodeBins, err := kubetest.BuildNodeBinaries(ctx, build)
	kubetest.SkipIfUnavailable(t, err)

	if e.gateway, err = e.engine.createNetwork(ctx, e.network); err != nil {
		t.Fatal(err)
	}
	e.comps = e.serveBinaries(nodeBins)
	e.comps = append(e.comps, e.aptComponents(ctx)...)

	h, err := kubetest.NewHermetic(kubetest.HermeticOptions{
		Binaries: bins, Dir: filepath.Join(t.TempDir(), "cluster"), Out: kubetest.TestLog{T: t},
		Join: &kubetest.JoinOptions{Address: e.gateway, Kubeadm: nodeBins.Kubeadm},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control-plane logs:\n%s", h.LogTails(30))
		}
		if err := h.Stop(context.Background()); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	e.cluster = h
	rc, err := h.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if e.kube, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	if e.caHash, err = h.CACertHash(); err != nil {
		t.Fatal(err)
	}
	if e.api, err = h.APIServerEndpoint(); err != nil {
		t.Fatal(err)
	}
	return e
}

// serveBinaries serves kubelet, kubeadm and the CNI plugins from the network's gateway (the
// stand-in for the upstream download) and returns them as binary components.
func (e *env) serveBinaries(bins kubetest.NodeBinaries) []bootstrap.Component {
	t := e.t
	files := map[string]string{"/kubelet": bins.Kubelet, "/kubeadm": bins.Kubeadm}
	var comps []bootstrap.Component
	add := func(name, version, src, dst string) {
		files["/"+name] = src
		comps = append(comps, bootstrap.Component{Name: name, Version: version, SHA256: fileSHA256(t, src), Path: dst})
	}
	add("kubelet", kubetest.KubernetesVersion, bins.Kubelet, "/usr/bin/kubelet")
	add("kubeadm", kubetest.KubernetesVersion, bins.Kubeadm, "/usr/bin/kubeadm")
	for _, p := range slices.Sorted(maps.Keys(bins.CNIPlugins)) {
		add("cni-"+p, kubetest.CNIPluginsVersion, bins.CNIPlugins[p], "/opt/cni/bin/"+p)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(e.gateway, "0"))
	if err != nil {
		t.Fatalf("listen on the network's gateway: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, p)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	for i := range comps {
		comps[i].URL = "http://" + ln.Addr().String() + "/" + comps[i].Name
	}
	return comps
}

// aptComponents asks apt in the base image which version of each package it installs.
func (e *env) aptComponents(ctx context.Context) []bootstrap.Component {
	t := e.t
	c, err := e.engine.c.ContainerCreate(ctx, &container.Config{Image: e.image.Ref, Entrypoint: []string{"sleep", "300"},
		Labels: e.engine.labels(nil)}, &container.HostConfig{NetworkMode: "none"}, nil, nil, e.name+"-apt")
	if err != nil {
		t.Fatal(err)
	}
	defer e.engine.c.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	if err := e.engine.c.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	out, code, err := e.engine.exec(ctx, c.ID, append([]string{"apt-cache", "show", "--no-all-versions"}, aptComponents...)...)
	if err != nil || code != 0 {
		t.Fatalf("apt-cache show in the base image: exit %d, %v\n%s", code, err, out)
	}
	versions := map[string]string{}
	var pkg string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Package: "); ok {
			pkg = v
		}
		if v, ok := strings.CutPrefix(line, "Version: "); ok && pkg != "" {
			versions[pkg] = v
		}
	}
	var comps []bootstrap.Component
	for _, p := range aptComponents {
		if versions[p] == "" {
			t.Fatalf("apt in the base image has no version of %s:\n%s", p, out)
		}
		comps = append(comps, bootstrap.Component{Name: p, Version: versions[p]})
	}
	return comps
}

// nodeRuntime is what a node in a container declares (docs/docker.md has why).
func nodeRuntime() bootstrap.Runtime {
	return bootstrap.Runtime{
		SharedKernel:        true,
		RestrictOOMScoreAdj: true,
		SandboxImage:        PauseImage,
		Kubelet:             map[string]any{"failCgroupV1": false},
		// kubeadm's SystemVerification reads the kernel config (/proc/config.gz,
		// /boot/config-*), which a container has not, and warns about cgroup v1.
		IgnorePreflightErrors: []string{"SystemVerification"},
		PodNetwork:            &bootstrap.PodNetwork{},
	}
}

// node is one node container.
type node struct {
	name, id, providerID string
	started              time.Time // ContainerStart returned
}

// bootNode renders the node's user-data with bootstrap (edit may change the input), creates
// its volume and container, writes user-data and meta-data into NoCloud's seed directory
// and starts it.
func (e *env) bootNode(ctx context.Context, name string, edit func(*bootstrap.Input)) *node {
	t := e.t
	tok, err := bootstrap.Tokens{Client: e.kube}.CreateForNode(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	in := bootstrap.Input{
		Provider:   "docker",
		Cluster:    bootstrap.Cluster{APIServerEndpoint: e.api, CACertHashes: []string{e.caHash}},
		JoinToken:  tok.Value(),
		NodeName:   name,
		ProviderID: "docker://" + name,
		Labels:     map[string]string{"prebake.dev/group": "real"},
		Components: e.comps,
		Runtime:    nodeRuntime(),
	}
	if edit != nil {
		edit(&in)
	}
	ud, err := bootstrap.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	labels := e.engine.labels(map[string]string{"prebake.dev/node": name})
	vol := name + "-containerd"
	if _, err := e.engine.c.VolumeCreate(ctx, volumeCreate(vol, labels)); err != nil {
		t.Fatal(err)
	}
	cfg, host, netCfg := baseimage.NodeContainer(baseimage.NodeSpec{Name: name, Image: e.image.Ref, Network: e.network,
		Volume: vol, Labels: labels})
	c, err := e.engine.c.ContainerCreate(ctx, cfg, host, netCfg, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	seed := strings.TrimPrefix(baseimage.SeedDir, "/")
	tr, err := tarFiles(map[string][]byte{
		seed + "/user-data": ud.CloudConfig,
		seed + "/meta-data": []byte(fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", name, name)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.engine.c.CopyToContainer(ctx, c.ID, "/", tr, container.CopyToContainerOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.engine.c.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return &node{name: name, id: c.ID, providerID: in.ProviderID, started: time.Now()}
}

// status reads the node's bootstrap status file; ok is false while there is none.
func (e *env) status(ctx context.Context, n *node) (bootstrap.Status, bool, error) {
	out, code, err := e.engine.exec(ctx, n.id, "cat", bootstrap.DefaultStatusPath)
	if err != nil {
		return bootstrap.Status{}, false, err
	}
	if code != 0 {
		return bootstrap.Status{}, false, nil
	}
	st, err := bootstrap.ParseStatus([]byte(out))
	return st, err == nil, err
}

// nodeError is the node's own account of a failed boot: the status file's error and the
// tail of cloud-init's output log, where the node script's (and kubeadm's) output goes.
func (e *env) nodeError(ctx context.Context, n *node, st bootstrap.Status) error {
	const log = "/var/log/cloud-init-output.log"
	errs, _, err := e.engine.exec(ctx, n.id, "sh", "-c", "grep -iE 'error|fatal|prebake-bootstrap' "+log+" | tail -n 20")
	if err != nil {
		errs = fmt.Sprintf("(cannot read %s: %v)", log, err)
	}
	tail, _, _ := e.engine.exec(ctx, n.id, "tail", "-n", "15", log)
	return fmt.Errorf("node %s failed to boot: %s\n----- error lines of the node's %s -----\n%s----- its last 15 lines -----\n%s",
		n.name, st.Error, log, errs, tail)
}

// waitNode waits until the Node with n's providerID is Ready, or the node reports a failed
// boot (then the error is the node's own), or ctx ends. It records when the Node first
// appeared and when it went Ready, as this test saw it.
func (e *env) waitNode(ctx context.Context, n *node) (registered, ready time.Time, err error) {
	for {
		no, err := e.kube.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		switch {
		case err == nil:
			if registered.IsZero() {
				registered = time.Now()
			}
			if no.Spec.ProviderID != n.providerID {
				return registered, ready, fmt.Errorf("node %s registered with providerID %q, want %q", n.name, no.Spec.ProviderID, n.providerID)
			}
			if isReady(no) {
				return registered, time.Now(), nil
			}
		case !apierrors.IsNotFound(err):
			return registered, ready, err
		}
		if st, ok, err := e.status(ctx, n); err == nil && ok && st.Result == "failed" {
			return registered, ready, e.nodeError(ctx, n, st)
		}
		select {
		case <-ctx.Done():
			st, _, _ := e.status(context.Background(), n)
			return registered, ready, fmt.Errorf("node %s not Ready: %w; %v", n.name, ctx.Err(), e.nodeError(context.Background(), n, st))
		case <-time.After(time.Second):
		}
	}
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// importImages loads the pod images into the node's containerd: the stand-in for a registry
// pull until the local registry serves them.
func (e *env) importImages(ctx context.Context, n *node, archive []byte) error {
	tr, err := tarFiles(map[string][]byte{"root/e2e-images.tar": archive})
	if err != nil {
		return err
	}
	if err := e.engine.c.CopyToContainer(ctx, n.id, "/", tr, container.CopyToContainerOptions{}); err != nil {
		return err
	}
	out, code, err := e.engine.exec(ctx, n.id, "ctr", "-n", "k8s.io", "images", "import", "/root/e2e-images.tar")
	if err != nil || code != 0 {
		return fmt.Errorf("ctr images import: exit %d, %v\n%s", code, err, out)
	}
	return nil
}

// cloudInitStages are cloud-init's own start and end times (/run/cloud-init/status.json).
func (e *env) cloudInitStages(ctx context.Context, n *node) (map[string][2]float64, error) {
	out, code, err := e.engine.exec(ctx, n.id, "cat", "/run/cloud-init/status.json")
	if err != nil || code != 0 {
		return nil, fmt.Errorf("read cloud-init status: exit %d, %v", code, err)
	}
	var st struct {
		V1 map[string]json.RawMessage `json:"v1"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, err
	}
	stages := map[string][2]float64{}
	for name, raw := range st.V1 {
		var s struct {
			Start, Finished *float64
		}
		if json.Unmarshal(raw, &s) == nil && s.Start != nil && s.Finished != nil {
			stages[name] = [2]float64{*s.Start, *s.Finished}
		}
	}
	return stages, nil
}

// unixExec runs a command whose output is a unix time in seconds (with a fraction).
func (e *env) unixExec(ctx context.Context, n *node, argv ...string) (time.Time, error) {
	out, code, err := e.engine.exec(ctx, n.id, argv...)
	if err != nil || code != 0 {
		return time.Time{}, fmt.Errorf("%s: exit %d, %v: %s", strings.Join(argv, " "), code, err, out)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(strings.Fields(out + " 0")[0]), 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q: %w", strings.Join(argv, " "), out, err)
	}
	return time.Unix(0, int64(f*1e9)), nil
}

func fileSHA256(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
