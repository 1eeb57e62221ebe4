package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

// nodeCommands are the node-side Kubernetes binaries, built in one go build for the same
// reason as k8sCommands. They never run in the hermetic cluster: bootstrap's system tests
// serve them from a loopback file server and install them into a Debian root filesystem.
var nodeCommands = []string{
	"k8s.io/kubernetes/cmd/kubelet",
	"k8s.io/kubernetes/cmd/kubeadm",
}

// CNIPluginsVersion is the containernetworking/plugins release BuildNodeBinaries builds.
const CNIPluginsVersion = "v1.9.0"

// cniPlugins are the reference CNI plugins a kubeadm node with a bridge network or a CNI
// such as Cilium relies on (Cilium chains nothing but needs loopback only through
// containerd; the others serve simple bridge setups and hostPort).
var cniPlugins = []string{
	"github.com/containernetworking/plugins/plugins/main/loopback",
	"github.com/containernetworking/plugins/plugins/main/bridge",
	"github.com/containernetworking/plugins/plugins/ipam/host-local",
	"github.com/containernetworking/plugins/plugins/meta/portmap",
}

// nodeStampContent is what a complete kubelet/kubeadm build writes to <cache>/node-stamp;
// cniStampContent is the CNI plugins' <cache>/cni-stamp. Separate stamps let one be
// rebuilt without the other.
var (
	nodeStampContent = fmt.Sprintf("prebake node binaries\nkubernetes %s\n", KubernetesVersion)
	cniStampContent  = fmt.Sprintf("prebake CNI plugins\nplugins %s\n", CNIPluginsVersion)
)

// NodeBinaries are absolute paths of the node executables BuildNodeBinaries makes.
type NodeBinaries struct {
	Dir     string // the cache directory they live in (the same one Build uses)
	Kubelet string
	Kubeadm string
	// CNIPlugins maps a plugin name (loopback, bridge, host-local, portmap) to its binary.
	CNIPlugins map[string]string
}

func nodeBinariesIn(dir string) NodeBinaries {
	bin := filepath.Join(dir, "node-bin")
	n := NodeBinaries{Dir: dir, Kubelet: filepath.Join(bin, "kubelet"), Kubeadm: filepath.Join(bin, "kubeadm"),
		CNIPlugins: map[string]string{}}
	for _, p := range cniPlugins {
		n.CNIPlugins[filepath.Base(p)] = filepath.Join(bin, "cni", filepath.Base(p))
	}
	return n
}

func (n NodeBinaries) check() error {
	for _, f := range []struct{ name, path string }{{"kubelet", n.Kubelet}, {"kubeadm", n.Kubeadm}} {
		if err := checkExecutable(f.path); err != nil {
			return fmt.Errorf("%s binary: %w (run cluster.BuildNodeBinaries to make it)", f.name, err)
		}
	}
	return nil
}

func (n NodeBinaries) checkCNI() error {
	for name, path := range n.CNIPlugins {
		if err := checkExecutable(path); err != nil {
			return fmt.Errorf("CNI plugin %s: %w (run cluster.BuildNodeBinaries to make it)", name, err)
		}
	}
	return nil
}

// BuildNodeBinaries makes kubelet and kubeadm at KubernetesVersion, statically linked
// (CGO_ENABLED=0), in <CacheDir>/node-bin, and the CNI plugins at CNIPluginsVersion in
// <CacheDir>/node-bin/cni, or reuses what a previous complete build left there. It shares
// Build's cache directory and Go caches but has its own wrapper modules, stamps (node-stamp,
// cni-stamp), log (node-build.log) and lock (.node-lock), so it neither waits for nor
// invalidates a control-plane build. Cold, it takes 5–25 minutes on 2 cores.
//
// crictl is not built: the Go module proxy does not serve sigs.k8s.io/cri-tools at the
// matching v1.35.0, and kubeadm join no longer needs crictl.
func BuildNodeBinaries(ctx context.Context, opts BuildOptions) (NodeBinaries, error) {
	began := time.Now()
	opts, dir, err := opts.withDefaults()
	if err != nil {
		return NodeBinaries{}, err
	}
	bins := nodeBinariesIn(dir)
	if err := os.MkdirAll(filepath.Dir(bins.Kubelet), 0o755); err != nil {
		return NodeBinaries{}, fmt.Errorf("build node binaries: create cache dir: %w", err)
	}
	b := &builder{dir: dir, out: opts.Out, began: began, heartbeat: opts.Heartbeat, logName: "node-build.log"}
	unlock, err := b.lockFile(ctx, ".node-lock")
	if err != nil {
		return NodeBinaries{}, err
	}
	defer unlock()
	defer func() {
		if b.log != nil {
			b.log.Close()
		}
	}()

	if err := b.buildKubeletKubeadm(ctx, bins); err != nil {
		return NodeBinaries{}, err
	}
	if err := b.buildCNIPlugins(ctx, bins); err != nil {
		return NodeBinaries{}, err
	}
	b.logf("node binaries ready in %s", filepath.Dir(bins.Kubelet))
	return bins, nil
}

func (b *builder) buildKubeletKubeadm(ctx context.Context, bins NodeBinaries) error {
	stamp := filepath.Join(b.dir, "node-stamp")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == nodeStampContent && bins.check() == nil {
		b.logf("reusing node binaries in %s", filepath.Dir(bins.Kubelet))
		return nil
	}
	if err := os.Remove(stamp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("build node binaries: %w", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return fmt.Errorf("%w: the go command is not on PATH; install Go to build kubelet and kubeadm", ErrBackendUnavailable)
	}
	if err := b.openLog(); err != nil {
		return err
	}
	b.logf("building kubelet and kubeadm %s into %s (cold: 5–15 min on 2 cores; details in %s)",
		KubernetesVersion, filepath.Dir(bins.Kubelet), b.logPath())

	mod, err := b.downloadModule(ctx, "k8s.io/kubernetes@"+KubernetesVersion)
	if err != nil {
		return err
	}
	upstream, err := os.ReadFile(mod.GoMod)
	if err != nil {
		return fmt.Errorf("build node binaries: read kubernetes go.mod: %w", err)
	}
	gomod, err := k8sWrapperGoMod(upstream, KubernetesVersion, stagingVersion)
	if err != nil {
		return fmt.Errorf("build node binaries: %w", err)
	}
	work := b.workDir("k8s-node")
	if err := writeWrapper(work, gomod); err != nil {
		return err
	}
	pinned := make([]string, len(nodeCommands))
	for i, c := range nodeCommands {
		pinned[i] = c + "@" + KubernetesVersion // unpinned, go get jumps to the newest kubernetes
	}
	b.logf("node: go get -tool %s", baseNames(nodeCommands))
	if err := b.goCmd(ctx, work, append([]string{"get", "-tool"}, pinned...)...); err != nil {
		return err
	}
	b.logf("node: go build %s", baseNames(nodeCommands))
	args := append([]string{"build", "-ldflags", k8sLdflags(), "-o", filepath.Dir(bins.Kubelet) + "/"}, slices.Clone(nodeCommands)...)
	if err := b.goBuild(ctx, work, args...); err != nil {
		return err
	}
	if err := bins.check(); err != nil {
		return fmt.Errorf("node build finished but %w", err)
	}
	if err := writeFileAtomic(stamp, []byte(nodeStampContent)); err != nil {
		return fmt.Errorf("build node binaries: write stamp: %w", err)
	}
	return nil
}

func (b *builder) buildCNIPlugins(ctx context.Context, bins NodeBinaries) error {
	stamp := filepath.Join(b.dir, "cni-stamp")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == cniStampContent && bins.checkCNI() == nil {
		b.logf("reusing CNI plugins in %s", filepath.Join(filepath.Dir(bins.Kubelet), "cni"))
		return nil
	}
	if err := os.Remove(stamp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("build CNI plugins: %w", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return fmt.Errorf("%w: the go command is not on PATH; install Go to build the CNI plugins", ErrBackendUnavailable)
	}
	if err := b.openLog(); err != nil {
		return err
	}
	work := b.workDir("cni")
	if err := writeWrapper(work, "module hermetic/cnibin\n\ngo 1.26.0\n"); err != nil {
		return err
	}
	pinned := make([]string, len(cniPlugins))
	for i, p := range cniPlugins {
		pinned[i] = p + "@" + CNIPluginsVersion
	}
	b.logf("cni: go get -tool %s", baseNames(cniPlugins))
	if err := b.goCmd(ctx, work, append([]string{"get", "-tool"}, pinned...)...); err != nil {
		return err
	}
	out := filepath.Join(filepath.Dir(bins.Kubelet), "cni")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("build CNI plugins: %w", err)
	}
	b.logf("cni: go build %s", baseNames(cniPlugins))
	if err := b.goBuild(ctx, work, append([]string{"build", "-ldflags", "-s -w", "-o", out + "/"}, cniPlugins...)...); err != nil {
		return err
	}
	if err := bins.checkCNI(); err != nil {
		return fmt.Errorf("CNI build finished but %w", err)
	}
	if err := writeFileAtomic(stamp, []byte(cniStampContent)); err != nil {
		return fmt.Errorf("build CNI plugins: write stamp: %w", err)
	}
	b.logf("CNI plugins ready in %s", out)
	return nil
}

// openLog opens node-build.log once per BuildNodeBinaries, when something is built.
func (b *builder) openLog() error {
	if b.log != nil {
		return nil
	}
	f, err := os.Create(b.logPath())
	if err != nil {
		return fmt.Errorf("build node binaries: %w", err)
	}
	b.log = f
	return nil
}
