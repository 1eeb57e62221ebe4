package realnode

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/e2e/serveproc"
	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/internal/kubetest/registry"
	"github.com/prebake-dev/prebake/providers/docker/baseimage"
)

// ErrPrerequisite wraps what makes a world impossible on this machine (not root, no Docker
// engine, no go command, no debootstrap, no module proxy): tests skip on it with one line,
// except under CI=true.
var ErrPrerequisite = errors.New("real-node prerequisite missing")

// RegistryName is the registry host the pod images are named with
// (prebake-registry.test/prebake/pause:1). It resolves nowhere: containerd reaches it at the
// local registry's address through the docker provider's node.registries (hosts.toml), so
// the names baked into a prebaked image stay valid when the registry's address changes.
const RegistryName = "prebake-registry.test"

// MachineType is the one machine type of the worlds' configs: small enough for two nodes on
// a 2-CPU host.
const (
	MachineType       = "docker-small"
	machineTypeCPU    = "1"
	machineTypeMemory = "2Gi"
	machineTypePods   = 30
)

// aptComponents are the Debian packages of a node, named as the image manifest names them
// (imagecatalog.DefaultComponents), with the apt package where it differs; their versions
// are what the base image's package lists offer.
var aptComponents = []struct{ name, pkg string }{
	{"containerd", ""}, {"runc", ""}, {"conntrack", ""}, {"socat", ""}, {"ebtables", ""},
	{"ethtool", ""}, {"iptables", ""}, {"open-iscsi", ""}, {"nfs-common", ""},
	// The kernel is the host's: a container node needs WireGuard's tools, not the wireguard
	// package, whose dependency on a kernel's modules pulls in a whole kernel image.
	{"wireguard", "wireguard-tools"},
	// Debian's package of the CNI reference plugins; the node uses the cni-* binaries below
	// (v1.9.0, in /opt/cni/bin, where containerd looks).
	{"kubernetes-cni", "containernetworking-plugins"},
}

// Options configure Start.
type Options struct {
	// Out receives progress lines from the first second on; nil discards them.
	Out io.Writer
	// Dir holds the world's files (configs, logs, the prebake binary); it must exist.
	Dir string
}

// World is what the real-node scenarios and `make demo-docker` share: a Docker network
// whose gateway the hermetic control plane (joinable by kubeadm), a file server with the node
// binaries (the stand-in for the upstream download, sha256-checked) and the local OCI
// registry with the pod images listen on; the base image; the prebake binary. Close removes
// everything it made in the engine.
type World struct {
	Name     string // prn<pid>-<hex>: the prefix of everything it makes
	Engine   *client.Client
	Dir      string
	Out      io.Writer
	Network  string
	Gateway  string
	Cluster  *kubetest.Hermetic
	Kube     kubernetes.Interface
	API      string // host:port nodes join
	CAHash   string // sha256:<hex> of the cluster CA's public key
	Base     baseimage.Image
	Prebake  string // the prebake binary
	Registry *registry.Server
	// PauseImage and WorkloadImage are the pod images, named with RegistryName.
	PauseImage, WorkloadImage string
	// Components are what every node runs (the config's bootstrap.components).
	Components []bootstrap.Component

	closers      []func() error
	registryOpts registry.Options
	registryMu   sync.Mutex
	largeMu      sync.Mutex
	large        map[registry.LargeOptions]string
}

// LargeImage makes the registry's large image (the workload image plus o.Size bytes of
// incompressible data in o.Layers layers, generated on the fly), pushes it once per options,
// and returns its reference, named with RegistryName.
func (w *World) LargeImage(ctx context.Context, o registry.LargeOptions) (string, error) {
	w.largeMu.Lock()
	defer w.largeMu.Unlock()
	if ref, ok := w.large[o]; ok {
		return ref, nil
	}
	bb, err := registry.FetchBusybox(ctx, registry.BuildOptions{Out: w.Out})
	if err != nil {
		return "", unavailable(err)
	}
	img, err := registry.LargeImage(bb, o)
	if err != nil {
		return "", err
	}
	w.registryMu.Lock()
	r := w.Registry
	w.registryMu.Unlock()
	if r == nil {
		return "", fmt.Errorf("push the large image: the registry is stopped (StartRegistry first)")
	}
	began := time.Now()
	w.logf("pushing %s/%s:%s (%d MiB in %d layers) to the registry", RegistryName, img.Repository, img.Tag, o.Size>>20, o.Layers)
	if _, err := registry.Push(ctx, r.Host(), img); err != nil {
		return "", err
	}
	w.logf("pushed the large image in %s", time.Since(began).Round(time.Millisecond))
	ref := RegistryName + "/" + img.Repository + ":" + img.Tag
	if w.large == nil {
		w.large = map[registry.LargeOptions]string{}
	}
	w.large[o] = ref
	return ref, nil
}

// StopRegistry stops the local registry, the only place the nodes can pull pod images
// from; StartRegistry starts it again at the same address with the same images.
func (w *World) StopRegistry() error {
	w.registryMu.Lock()
	defer w.registryMu.Unlock()
	if w.Registry == nil {
		return nil
	}
	err := w.Registry.Stop()
	w.Registry = nil
	return err
}

// StartRegistry starts the registry StopRegistry stopped; a running one is left alone.
func (w *World) StartRegistry(ctx context.Context) error {
	w.registryMu.Lock()
	defer w.registryMu.Unlock()
	if w.Registry != nil {
		return nil
	}
	r, err := registry.Start(ctx, w.registryOpts)
	if err != nil {
		return fmt.Errorf("start the registry again at %s: %w", w.registryOpts.Addr, err)
	}
	w.Registry = r
	return nil
}

func (w *World) logf(format string, args ...any) {
	fmt.Fprintf(w.Out, "realnode: %s\n", fmt.Sprintf(format, args...))
}

// Start builds (or reuses from the caches) and starts everything; on failure what it
// started is closed. A missing prerequisite is ErrPrerequisite.
func Start(ctx context.Context, o Options) (w *World, err error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: not root (the base image is made with debootstrap)", ErrPrerequisite)
	}
	if _, err := exec.LookPath("go"); err != nil {
		return nil, fmt.Errorf("%w: the go command is not on PATH (it builds the control plane and the node binaries)", ErrPrerequisite)
	}
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("%w: no Docker client: %v", ErrPrerequisite, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, perr := c.Ping(pctx)
	cancel()
	if perr != nil {
		c.Close()
		return nil, fmt.Errorf("%w: the Docker engine does not answer (%v)", ErrPrerequisite, perr)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	w = &World{Name: fmt.Sprintf("prn%d-%s", os.Getpid(), hex.EncodeToString(b)), Engine: c, Dir: o.Dir, Out: o.Out}
	w.closers = append(w.closers, func() error { return c.Close() })
	defer func() {
		if err != nil {
			w.Close()
			w = nil
		}
	}()
	w.logf("world %s: removing what killed runs left", w.Name)
	if err := reapDead(ctx, c); err != nil {
		return w, fmt.Errorf("remove what killed runs left in the engine: %w", err)
	}
	w.closers = append(w.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		return removeWorld(ctx, c, w.Name)
	})

	w.logf("base image (debootstrap once per machine and week, then cached)")
	img, err := baseimage.Ensure(ctx, c, baseimage.Options{Out: o.Out})
	if errors.Is(err, baseimage.ErrPrerequisite) {
		return w, fmt.Errorf("%w: %v", ErrPrerequisite, err)
	}
	if err != nil {
		return w, err
	}
	w.Base = img
	if img.Imported {
		// The tarball is the cache; the image in the engine is this world's.
		w.closers = append(w.closers, func() error {
			// Images committed from it (the world's catalog images) go first.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := removeWorld(ctx, c, w.Name); err != nil {
				return err
			}
			_, err := c.ImageRemove(ctx, img.ID, removeImage)
			return ignoreNotFound(err)
		})
	}

	w.logf("control plane, node binaries, node tools, registry, pod images, prebake (cached builds)")
	build := kubetest.BuildOptions{Out: o.Out}
	bins, err := kubetest.Build(ctx, build)
	if err != nil {
		return w, unavailable(err)
	}
	nodeBins, err := kubetest.BuildNodeBinaries(ctx, build)
	if err != nil {
		return w, unavailable(err)
	}
	tools, err := kubetest.BuildNodeTools(ctx, build)
	if err != nil {
		return w, unavailable(err)
	}
	regBin, err := registry.BuildServer(ctx, registry.BuildOptions{Out: o.Out})
	if err != nil {
		return w, unavailable(err)
	}
	set, err := registry.BuildImages(ctx, registry.BuildOptions{Out: o.Out}, registry.LargeOptions{})
	if err != nil {
		return w, unavailable(err)
	}
	moduleDir, err := serveproc.ModuleDir(ctx)
	if err != nil {
		return w, err
	}
	if w.Prebake, err = serveproc.Build(ctx, moduleDir, o.Dir); err != nil {
		return w, err
	}

	w.Network = w.Name
	if w.Gateway, err = createNetwork(ctx, c, w.Network); err != nil {
		return w, err
	}
	w.logf("network %s, gateway %s: the control plane, file server and registry listen there", w.Network, w.Gateway)
	if err := w.serveBinaries(nodeBins, tools); err != nil {
		return w, err
	}
	apt, err := w.aptVersions(ctx)
	if err != nil {
		return w, err
	}
	w.Components = append(apt, w.Components...)

	w.registryOpts = registry.Options{Binary: regBin, Addr: net.JoinHostPort(w.Gateway, "0"),
		StorageDir: filepath.Join(o.Dir, "registry"), LogFile: filepath.Join(o.Dir, "registry.log")}
	if w.Registry, err = registry.Start(ctx, w.registryOpts); err != nil {
		return w, err
	}
	// Later starts (StartRegistry) listen where the nodes' containerd configs point.
	w.registryOpts.Addr = w.Registry.Addr
	w.closers = append(w.closers, w.StopRegistry)
	for _, im := range set.All() {
		if _, err := registry.Push(ctx, w.Registry.Host(), im); err != nil {
			return w, err
		}
	}
	w.PauseImage = RegistryName + "/" + set.Pause.Repository + ":" + set.Pause.Tag
	w.WorkloadImage = RegistryName + "/" + set.Workload.Repository + ":" + set.Workload.Tag

	h, err := kubetest.NewHermetic(kubetest.HermeticOptions{
		Binaries: bins, Dir: filepath.Join(o.Dir, "cluster"), Out: o.Out,
		Join: &kubetest.JoinOptions{Address: w.Gateway, Kubeadm: nodeBins.Kubeadm},
	})
	if err != nil {
		return w, err
	}
	w.closers = append(w.closers, func() error { return h.Stop(context.Background()) })
	w.logf("starting the control plane on %s", w.Gateway)
	if err := h.Start(ctx); err != nil {
		return w, err
	}
	w.Cluster = h
	rc, err := h.RESTConfig()
	if err != nil {
		return w, err
	}
	if w.Kube, err = kubernetes.NewForConfig(rc); err != nil {
		return w, err
	}
	if w.CAHash, err = h.CACertHash(); err != nil {
		return w, err
	}
	if w.API, err = h.APIServerEndpoint(); err != nil {
		return w, err
	}
	w.logf("world ready: API %s, registry %s (as %s)", w.API, w.Registry.Host(), RegistryName)
	return w, nil
}

var removeImage = image.RemoveOptions{Force: true, PruneChildren: true}

func ignoreNotFound(err error) error {
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	return err
}

func unavailable(err error) error {
	if errors.Is(err, kubetest.ErrBackendUnavailable) || errors.Is(err, registry.ErrUnavailable) {
		return fmt.Errorf("%w: %v", ErrPrerequisite, err)
	}
	return err
}

// Close stops and removes everything the world made, the last first, and returns what it
// could not.
func (w *World) Close() error {
	var errs []error
	for i := len(w.closers) - 1; i >= 0; i-- {
		errs = append(errs, w.closers[i]())
	}
	w.closers = nil
	return errors.Join(errs...)
}

// serveBinaries serves kubelet, kubeadm, kubectl, crictl and the CNI plugins from the
// network's gateway (the stand-in for the upstream download) and adds them as binary
// components.
func (w *World) serveBinaries(bins kubetest.NodeBinaries, tools kubetest.NodeTools) error {
	files := map[string]string{}
	add := func(name, version, src, dst string) error {
		sum, err := fileSHA256(src)
		if err != nil {
			return err
		}
		files["/"+name] = src
		w.Components = append(w.Components, bootstrap.Component{Name: name, Version: version, SHA256: sum, Path: dst})
		return nil
	}
	for _, b := range []struct{ name, version, src, dst string }{
		{"kubelet", kubetest.KubernetesVersion, bins.Kubelet, "/usr/bin/kubelet"},
		{"kubeadm", kubetest.KubernetesVersion, bins.Kubeadm, "/usr/bin/kubeadm"},
		{"kubectl", kubetest.KubernetesVersion, tools.Kubectl, "/usr/bin/kubectl"},
		{"cri-tools", kubetest.CriToolsVersion, tools.Crictl, "/usr/bin/crictl"},
	} {
		if err := add(b.name, b.version, b.src, b.dst); err != nil {
			return err
		}
	}
	for _, p := range slices.Sorted(maps.Keys(bins.CNIPlugins)) {
		if err := add("cni-"+p, kubetest.CNIPluginsVersion, bins.CNIPlugins[p], "/opt/cni/bin/"+p); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(w.Gateway, "0"))
	if err != nil {
		return fmt.Errorf("listen on the network's gateway: %w", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		p, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(rw, r)
			return
		}
		http.ServeFile(rw, r, p)
	})}
	go func() { _ = srv.Serve(ln) }()
	w.closers = append(w.closers, srv.Close)
	for i := range w.Components {
		w.Components[i].URL = "http://" + ln.Addr().String() + "/" + w.Components[i].Name
	}
	return nil
}

// aptVersions asks apt in the base image which version of each package it installs.
func (w *World) aptVersions(ctx context.Context) ([]bootstrap.Component, error) {
	c := w.Engine
	name := w.Name + "-apt"
	ct, err := c.ContainerCreate(ctx, &container.Config{Image: w.Base.Ref, Entrypoint: []string{"sleep", "300"},
		Labels: map[string]string{LabelCluster: w.Name}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, name)
	if err != nil {
		return nil, err
	}
	defer c.ContainerRemove(context.WithoutCancel(ctx), ct.ID, container.RemoveOptions{Force: true})
	if err := c.ContainerStart(ctx, ct.ID, container.StartOptions{}); err != nil {
		return nil, err
	}
	pkgs := make([]string, len(aptComponents))
	for i, a := range aptComponents {
		pkgs[i] = a.name
		if a.pkg != "" {
			pkgs[i] = a.pkg
		}
	}
	out, code, err := Exec(ctx, c, ct.ID, append([]string{"apt-cache", "show", "--no-all-versions"}, pkgs...)...)
	if err != nil || code != 0 {
		return nil, fmt.Errorf("apt-cache show in the base image: exit %d, %v\n%s", code, err, out)
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
	for i, a := range aptComponents {
		if versions[pkgs[i]] == "" {
			return nil, fmt.Errorf("apt in the base image has no version of %s:\n%s", pkgs[i], out)
		}
		comps = append(comps, bootstrap.Component{Name: a.name, Version: versions[pkgs[i]], Package: a.pkg})
	}
	return comps, nil
}

// Versions are the components' versions by name: what a recipe asks for.
func (w *World) Versions() map[string]string {
	m := map[string]string{}
	for _, c := range w.Components {
		m[c.Name] = c.Version
	}
	return m
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// HostDescription names the machine the figures come from: the engine's version, cgroup
// version and storage driver, the kernel and the CPUs.
func (w *World) HostDescription(ctx context.Context) string {
	info, err := w.Engine.Info(ctx)
	if err != nil {
		return "unknown host"
	}
	return fmt.Sprintf("%s, Docker %s, cgroup v%s, %s storage, kernel %s, %d CPUs, %.1f GiB",
		info.OperatingSystem, info.ServerVersion, info.CgroupVersion, info.Driver, info.KernelVersion, info.NCPU, float64(info.MemTotal)/(1<<30))
}
