package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// nodeStampContent is what a complete node build writes to <cache>/node-stamp.
var nodeStampContent = fmt.Sprintf("prebake node binaries\nkubernetes %s\n", KubernetesVersion)

// NodeBinaries are absolute paths of the node executables BuildNodeBinaries makes.
type NodeBinaries struct {
	Dir     string // the cache directory they live in (the same one Build uses)
	Kubelet string
	Kubeadm string
}

func nodeBinariesIn(dir string) NodeBinaries {
	bin := filepath.Join(dir, "node-bin")
	return NodeBinaries{Dir: dir, Kubelet: filepath.Join(bin, "kubelet"), Kubeadm: filepath.Join(bin, "kubeadm")}
}

func (n NodeBinaries) check() error {
	for _, f := range []struct{ name, path string }{{"kubelet", n.Kubelet}, {"kubeadm", n.Kubeadm}} {
		if err := checkExecutable(f.path); err != nil {
			return fmt.Errorf("%s binary: %w (run cluster.BuildNodeBinaries to make it)", f.name, err)
		}
	}
	return nil
}

// BuildNodeBinaries makes kubelet and kubeadm at KubernetesVersion, statically linked
// (CGO_ENABLED=0), in <CacheDir>/node-bin, or reuses them when a previous complete build left
// them there. It shares Build's cache directory and Go caches but has its own wrapper module,
// stamp (node-stamp), log (node-build.log) and lock (.node-lock), so it neither waits for nor
// invalidates a control-plane build. Cold, it takes 5–15 minutes on 2 cores.
func BuildNodeBinaries(ctx context.Context, opts BuildOptions) (NodeBinaries, error) {
	began := time.Now()
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 30 * time.Second
	}
	if opts.CacheDir == "" {
		dir, err := DefaultCacheDir()
		if err != nil {
			return NodeBinaries{}, err
		}
		opts.CacheDir = dir
	}
	dir, err := filepath.Abs(opts.CacheDir)
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

	stamp := filepath.Join(dir, "node-stamp")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == nodeStampContent && bins.check() == nil {
		b.logf("reusing node binaries in %s", filepath.Dir(bins.Kubelet))
		return bins, nil
	}
	if err := os.Remove(stamp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return NodeBinaries{}, fmt.Errorf("build node binaries: %w", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return NodeBinaries{}, fmt.Errorf("%w: the go command is not on PATH; install Go to build kubelet and kubeadm", ErrBackendUnavailable)
	}
	buildLog, err := os.Create(b.logPath())
	if err != nil {
		return NodeBinaries{}, fmt.Errorf("build node binaries: %w", err)
	}
	defer buildLog.Close()
	b.log = buildLog
	b.logf("building kubelet and kubeadm %s into %s (cold: 5–15 min on 2 cores; details in %s)",
		KubernetesVersion, filepath.Dir(bins.Kubelet), b.logPath())

	mod, err := b.downloadModule(ctx, "k8s.io/kubernetes@"+KubernetesVersion)
	if err != nil {
		return NodeBinaries{}, err
	}
	upstream, err := os.ReadFile(mod.GoMod)
	if err != nil {
		return NodeBinaries{}, fmt.Errorf("build node binaries: read kubernetes go.mod: %w", err)
	}
	gomod, err := k8sWrapperGoMod(upstream, KubernetesVersion, stagingVersion)
	if err != nil {
		return NodeBinaries{}, fmt.Errorf("build node binaries: %w", err)
	}
	work := b.workDir("k8s-node")
	if err := writeWrapper(work, gomod); err != nil {
		return NodeBinaries{}, err
	}
	pinned := make([]string, len(nodeCommands))
	for i, c := range nodeCommands {
		pinned[i] = c + "@" + KubernetesVersion // unpinned, go get jumps to the newest kubernetes
	}
	b.logf("node: go get -tool %s", baseNames(nodeCommands))
	if err := b.goCmd(ctx, work, append([]string{"get", "-tool"}, pinned...)...); err != nil {
		return NodeBinaries{}, err
	}
	b.logf("node: go build %s", baseNames(nodeCommands))
	args := append([]string{"build", "-ldflags", k8sLdflags(), "-o", filepath.Dir(bins.Kubelet) + "/"}, slices.Clone(nodeCommands)...)
	if err := b.goBuild(ctx, work, args...); err != nil {
		return NodeBinaries{}, err
	}
	if err := bins.check(); err != nil {
		return NodeBinaries{}, fmt.Errorf("node build finished but %w", err)
	}
	if err := writeFileAtomic(stamp, []byte(nodeStampContent)); err != nil {
		return NodeBinaries{}, fmt.Errorf("build node binaries: write stamp: %w", err)
	}
	b.logf("node binaries ready in %s", filepath.Dir(bins.Kubelet))
	return bins, nil
}
