package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// CriToolsVersion is the sigs.k8s.io/cri-tools release BuildNodeTools builds crictl from:
// the proxy has no v1.35.0, and crictl speaks the stable CRI v1 API to any containerd that
// kubelet v1.35 does.
const CriToolsVersion = "v1.34.0"

const crictlCommand = "sigs.k8s.io/cri-tools/cmd/crictl"

var toolsStampContent = fmt.Sprintf("prebake node tools\nkubectl %s\ncri-tools %s\n", KubernetesVersion, CriToolsVersion)

// NodeTools are the node-side tools a prebaked image of the catalog's default manifest
// holds besides kubelet and kubeadm (imagecatalog.DefaultComponents kubectl and cri-tools),
// built from their Go modules, statically linked.
type NodeTools struct {
	Kubectl string // at KubernetesVersion
	Crictl  string // at CriToolsVersion
}

func nodeToolsIn(dir string) NodeTools {
	bin := filepath.Join(dir, "node-bin", "tools")
	return NodeTools{Kubectl: filepath.Join(bin, "kubectl"), Crictl: filepath.Join(bin, "crictl")}
}

func (n NodeTools) check() error {
	for _, f := range []struct{ name, path string }{{"kubectl", n.Kubectl}, {"crictl", n.Crictl}} {
		if err := checkExecutable(f.path); err != nil {
			return fmt.Errorf("%s binary: %w (run kubetest.BuildNodeTools to make it)", f.name, err)
		}
	}
	return nil
}

// BuildNodeTools makes kubectl at KubernetesVersion and crictl at CriToolsVersion in
// <CacheDir>/node-bin/tools, or reuses what a previous complete build left there. It shares
// BuildNodeBinaries' lock (.node-lock) and log, with a stamp of its own (tools-stamp), so
// neither invalidates the other. Cold, it takes a few minutes on 2 cores (the kubernetes
// module and most packages are already in the Go caches after BuildNodeBinaries).
func BuildNodeTools(ctx context.Context, opts BuildOptions) (NodeTools, error) {
	began := time.Now()
	opts, dir, err := opts.withDefaults()
	if err != nil {
		return NodeTools{}, err
	}
	tools := nodeToolsIn(dir)
	stamp := filepath.Join(dir, "tools-stamp")
	b := &builder{dir: dir, out: opts.Out, began: began, heartbeat: opts.Heartbeat, logName: "node-build.log"}
	unlock, err := b.lockFile(ctx, ".node-lock")
	if err != nil {
		return NodeTools{}, err
	}
	defer unlock()
	defer func() {
		if b.log != nil {
			b.log.Close()
		}
	}()
	if got, err := os.ReadFile(stamp); err == nil && string(got) == toolsStampContent && tools.check() == nil {
		b.logf("reusing node tools in %s", filepath.Dir(tools.Kubectl))
		return tools, nil
	}
	if err := os.Remove(stamp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return NodeTools{}, fmt.Errorf("build node tools: %w", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return NodeTools{}, fmt.Errorf("%w: the go command is not on PATH; install Go to build kubectl and crictl", ErrBackendUnavailable)
	}
	if err := os.MkdirAll(filepath.Dir(tools.Kubectl), 0o755); err != nil {
		return NodeTools{}, fmt.Errorf("build node tools: %w", err)
	}
	if err := b.openLog(); err != nil {
		return NodeTools{}, err
	}
	b.logf("building kubectl %s and crictl %s into %s (details in %s)", KubernetesVersion, CriToolsVersion, filepath.Dir(tools.Kubectl), b.logPath())

	mod, err := b.downloadModule(ctx, "k8s.io/kubernetes@"+KubernetesVersion)
	if err != nil {
		return NodeTools{}, err
	}
	upstream, err := os.ReadFile(mod.GoMod)
	if err != nil {
		return NodeTools{}, fmt.Errorf("build node tools: read kubernetes go.mod: %w", err)
	}
	gomod, err := k8sWrapperGoMod(upstream, KubernetesVersion, stagingVersion)
	if err != nil {
		return NodeTools{}, fmt.Errorf("build node tools: %w", err)
	}
	work := b.workDir("k8s-tools")
	if err := writeWrapper(work, gomod); err != nil {
		return NodeTools{}, err
	}
	b.logf("tools: go get -tool kubectl")
	if err := b.goCmd(ctx, work, "get", "-tool", kubectlCommand+"@"+KubernetesVersion); err != nil {
		return NodeTools{}, err
	}
	b.logf("tools: go build kubectl")
	if err := b.goBuild(ctx, work, "build", "-ldflags", k8sLdflags(), "-o", tools.Kubectl, kubectlCommand); err != nil {
		return NodeTools{}, err
	}

	work = b.workDir("cri-tools")
	if err := writeWrapper(work, "module hermetic/critools\n\ngo 1.26.0\n"); err != nil {
		return NodeTools{}, err
	}
	b.logf("tools: go get -tool crictl")
	if err := b.goCmd(ctx, work, "get", "-tool", crictlCommand+"@"+CriToolsVersion); err != nil {
		return NodeTools{}, err
	}
	b.logf("tools: go build crictl")
	if err := b.goBuild(ctx, work, "build", "-ldflags", "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version="+CriToolsVersion, "-o", tools.Crictl, crictlCommand); err != nil {
		return NodeTools{}, err
	}
	if err := tools.check(); err != nil {
		return NodeTools{}, fmt.Errorf("node tools build finished but %w", err)
	}
	if err := writeFileAtomic(stamp, []byte(toolsStampContent)); err != nil {
		return NodeTools{}, fmt.Errorf("build node tools: write stamp: %w", err)
	}
	b.logf("node tools ready in %s", filepath.Dir(tools.Kubectl))
	return tools, nil
}
