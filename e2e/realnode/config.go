package realnode

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/providers"
)

// Group is one node group of a scenario's config.
type Group struct {
	ID       string
	MaxSize  int
	Prebaked bool // image: {channel: candidate}
	Labels   map[string]string
	Taints   []providers.Taint
	// WarmPool is warmPool.size (state stopped); 0 keeps no pool.
	WarmPool int
}

// ConfigOptions say what a config holds besides the world's settings.
type ConfigOptions struct {
	// Cluster is the clusterName: the world's name, a dash and a suffix.
	Cluster string
	Groups  []Group
	// Catalog is the image catalog file; needed when a group is prebaked.
	Catalog string
	// ImageRepository holds the catalog's images; "" means <world>-node (BuildPrebaked's).
	ImageRepository string
	// CACertHashes replaces the cluster's CA pin when set: a wrong one breaks the join.
	CACertHashes []string
}

var configTemplate = template.Must(template.New("config").Funcs(template.FuncMap{"q": func(s string) string { return fmt.Sprintf("%q", s) }}).Parse(`# Written by e2e/realnode for one run; see docs/docker.md.
apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: {{.Cluster}}
refreshInterval: 2s
providers:
  docker:
    baseImage: {{q .Base}}
    imageRepository: {{.Repository}}
    containerNamePrefix: {{.Cluster}}-
    machineTypes:
      # A nominal price: CA's price expander skips groups without one.
      - {name: {{.MachineType}}, cpu: {{q .CPU}}, memory: {{.Memory}}, pods: {{.Pods}}, pricePerHour: 0.01}
    node:
      sandboxImage: {{q .Pause}}
      registries:
        # The local registry on the network's gateway, plain HTTP.
        - {host: {{.RegistryName}}, endpoint: {{q .RegistryURL}}}
bootstrap:
  apiServerEndpoint: {{q .API}}
  caCertHashes: [{{range $i, $h := .CAHashes}}{{if $i}}, {{end}}{{q $h}}{{end}}]
  kubeconfig: {{q .Kubeconfig}}
  # Binaries come from a file server on the network's gateway, sha256-checked: the
  # stand-in for the upstream download. Debian packages come from Debian's mirror.
  components:
{{- range .Components}}
    - {name: {{.Name}}, version: {{q .Version}}{{if .Package}}, package: {{.Package}}{{end}}{{if .URL}}, url: {{q .URL}}, sha256: {{.SHA256}}, path: {{.Path}}{{end}}}
{{- end}}
{{- if .Catalog}}
imageCatalog: {file: {{q .Catalog}}}
{{- end}}
nodeGroups:
{{- range .Groups}}
  - id: {{.ID}}
    provider: docker
    minSize: 0
    maxSize: {{.MaxSize}}
    machineType: {{$.MachineType}}
    location: zone-a
{{- if .Labels}}
    labels:
{{- range $k, $v := .Labels}}
      {{$k}}: {{q $v}}
{{- end}}
{{- end}}
{{- if .Taints}}
    taints:
{{- range .Taints}}
      - {key: {{.Key}}, value: {{q .Value}}, effect: {{.Effect}}}
{{- end}}
{{- end}}
{{- if .Prebaked}}
    image: {channel: candidate}
{{- end}}
{{- if .WarmPool}}
    warmPool: {size: {{.WarmPool}}, state: stopped}
{{- end}}
{{- end}}
`))

// WriteConfig writes a ProviderConfig of the docker provider for the world to path.
func (w *World) WriteConfig(path string, o ConfigOptions) error {
	if !strings.HasPrefix(o.Cluster, w.Name+"-") {
		return fmt.Errorf("cluster %q: want %s-<suffix>, so the world removes what it leaves", o.Cluster, w.Name)
	}
	repo := o.ImageRepository
	if repo == "" {
		repo = w.Name + "-node"
	}
	hashes := o.CACertHashes
	if len(hashes) == 0 {
		hashes = []string{w.CAHash}
	}
	for _, g := range o.Groups {
		if g.Prebaked && o.Catalog == "" {
			return fmt.Errorf("group %s is prebaked: ConfigOptions.Catalog is required", g.ID)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return configTemplate.Execute(f, map[string]any{
		"Cluster": o.Cluster, "Base": w.Base.Ref, "Repository": repo, "MachineType": MachineType,
		"CPU": machineTypeCPU, "Memory": machineTypeMemory, "Pods": machineTypePods,
		"Pause": w.PauseImage, "RegistryName": RegistryName, "RegistryURL": w.Registry.URL(),
		"API": w.API, "CAHashes": hashes, "Kubeconfig": w.Cluster.Kubeconfig(),
		"Components": w.Components, "Catalog": o.Catalog, "Groups": o.Groups,
	})
}

// Recipe is the ImageRecipe of the prebaked image: every component the nodes run at the
// version they run, and the pod images (the pause and workload images, then extra).
func (w *World) Recipe(path string, extra ...string) error {
	images := make([]string, 0, 2+len(extra))
	for _, ref := range append([]string{w.PauseImage, w.WorkloadImage}, extra...) {
		images = append(images, fmt.Sprintf("%q", ref))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by e2e/realnode: the prebaked image of its nodes.
apiVersion: prebake.dev/v1alpha1
kind: ImageRecipe
images:
  - os: debian
    osVersion: "12"
    kubernetes: %s
    arch: amd64
    provider: docker
    baseImage: %q
    machineType: %s
    containerImages: [%s]
    components:
`, strings.TrimPrefix(kubetest.KubernetesVersion, "v"), w.Base.Ref, MachineType, strings.Join(images, ", "))
	v := w.Versions()
	for _, name := range slices.Sorted(maps.Keys(v)) {
		fmt.Fprintf(&b, "      %s: %q\n", name, v[name])
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Prebaked is a catalog image BuildPrebaked made.
type Prebaked struct {
	ID       string // the catalog id: the image's tag in Repository
	Ref      string // <repository>:<id>
	Catalog  string // the catalog file, with the image in candidate
	Manifest imagecatalog.Manifest
	Took     time.Duration
}

var buildMu sync.Mutex

// BuildSpec says which prebaked image BuildPrebaked makes.
type BuildSpec struct {
	// Repository holds the image ("" means <world>-node); a <world>- prefix makes Close
	// remove it.
	Repository string
	// ExtraImages are baked besides the pause and workload images.
	ExtraImages []string
}

// BuildPrebaked runs `prebake images build` with a config of cluster <world>-img (the
// docker provider through the same factory as serve) and the world's recipe, streaming its
// progress to Out, and returns the image it published to candidate of a catalog of its own
// (one per repository).
func (w *World) BuildPrebaked(ctx context.Context, spec BuildSpec) (Prebaked, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	repository := spec.Repository
	if repository == "" {
		repository = w.Name + "-node"
	}
	dir := filepath.Join(w.Dir, "images", repository)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Prebaked{}, err
	}
	cfg, recipe, catalog := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "recipe.yaml"), filepath.Join(dir, "catalog.yaml")
	if err := w.WriteConfig(cfg, ConfigOptions{Cluster: w.Name + "-img", ImageRepository: repository, Groups: []Group{{ID: "build", MaxSize: 1}}}); err != nil {
		return Prebaked{}, err
	}
	if err := w.Recipe(recipe, spec.ExtraImages...); err != nil {
		return Prebaked{}, err
	}
	began := time.Now()
	cmd := exec.CommandContext(ctx, w.Prebake, "images", "build", "--config", cfg, "--recipe", recipe,
		"--catalog", catalog, "--poll", "3s", "--timeout", "40m", "-o", "json")
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	var stdout strings.Builder
	cmd.Stdout = &stdout
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintf(w.Out, "[%5.0fs] images build: %s\n", time.Since(began).Seconds(), sc.Text())
		}
	}()
	w.logf("prebake images build --recipe %s (boots a builder from %s, installs, pulls the pod images, commits)", recipe, w.Base.Ref)
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		return Prebaked{}, fmt.Errorf("prebake images build: %w\n%s", err, stdout.String())
	}
	c, _, err := imagecatalog.FileStore{Path: catalog}.Load(ctx)
	if err != nil {
		return Prebaked{}, err
	}
	for _, ch := range c.Channels {
		if ch.Name != imagecatalog.ChannelCandidate || ch.Image == "" {
			continue
		}
		im, ok := c.Image(ch.Image)
		if !ok {
			continue
		}
		return Prebaked{ID: im.ID, Ref: repository + ":" + im.ID, Catalog: catalog, Manifest: im.Manifest, Took: time.Since(began)}, nil
	}
	return Prebaked{}, fmt.Errorf("prebake images build published nothing to %s in %s:\n%s", imagecatalog.ChannelCandidate, catalog, stdout.String())
}

// NodeComponents are the world's components as a node renders them (a check that the
// prebaked image's manifest has each at its version).
func (w *World) NodeComponents() []bootstrap.Component { return slices.Clone(w.Components) }
