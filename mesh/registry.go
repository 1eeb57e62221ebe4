package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Cilium's cluster identity rules, re-implemented so that production code imports no
// Cilium package (importing pkg/clustermesh/types adds 23 modules; docs/mesh.md,
// "What was checked, and how"). Sources, Cilium v1.20.2:
// pkg/clustermesh/types/{types.go,option.go}, pkg/defaults/defaults.go and the chart's
// templates/validate.yaml.
const (
	// MaxNameLength is the longest cluster name Cilium accepts (since 1.16).
	MaxNameLength = 32
	// MaxConnectedClusters255 and MaxConnectedClusters511 are the two values Cilium
	// accepts for clustermesh.maxConnectedClusters; 255 is the default.
	MaxConnectedClusters255 = 255
	MaxConnectedClusters511 = 511
)

// nameRE is Cilium's cluster name pattern.
var nameRE = regexp.MustCompile(`^([a-z0-9][-a-z0-9]*)?[a-z0-9]$`)

// Datapath settings under which Cilium refuses cluster ids with bit 7 set
// (128-255 and 384-511), see cilium#21330.
const (
	IPAMModeENI          = "eni"
	IPAMModeAlibabaCloud = "alibabacloud"
	ChainingModeAWSCNI   = "aws-cni"
)

// Cluster is one member of the mesh.
type Cluster struct {
	// Name is Cilium's cluster.name.
	Name string `yaml:"name"`
	// ID is Cilium's cluster.id. 0 means "allocate one" (see AssignIDs).
	ID int `yaml:"id,omitempty"`
	// Context is the kubeconfig context of the cluster's API server.
	Context string `yaml:"context,omitempty"`
	// APIServer is the cluster's Kubernetes API endpoint, when not taken from Context.
	APIServer string `yaml:"apiServer,omitempty"`
	// ClusterMeshAPIServer is the clustermesh-apiserver endpoint peers dial, host:port.
	ClusterMeshAPIServer string `yaml:"clustermeshAPIServer,omitempty"`
	// PodCIDRs are the cluster's pod CIDRs; they must not overlap across the mesh.
	PodCIDRs []string `yaml:"podCIDRs,omitempty"`
	// MaxConnectedClusters is 255 or 511 and must be equal mesh-wide. 0 means 255.
	MaxConnectedClusters int `yaml:"maxConnectedClusters,omitempty"`
	// IPAMMode and ChainingMode are Cilium's ipam.mode and cni.chainingMode; only the
	// values that restrict cluster ids matter here.
	IPAMMode     string `yaml:"ipamMode,omitempty"`
	ChainingMode string `yaml:"chainingMode,omitempty"`

	// Source is where the cluster was declared, "file:line", for error messages.
	Source string `yaml:"-"`
}

func (c Cluster) maxConnected() int {
	if c.MaxConnectedClusters == 0 {
		return MaxConnectedClusters255
	}
	return c.MaxConnectedClusters
}

// restrictedIDs reports whether the cluster's datapath refuses ids with bit 7 set.
func (c Cluster) restrictedIDs() bool {
	return c.IPAMMode == IPAMModeENI || c.IPAMMode == IPAMModeAlibabaCloud || c.ChainingMode == ChainingModeAWSCNI
}

// idAllowed reports whether id is a valid cluster id for c on its own.
func (c Cluster) idAllowed(id int) bool {
	return id >= 1 && id <= c.maxConnected() && !(c.restrictedIDs() && id&0x80 != 0)
}

// label names the cluster and where it was declared.
func (c Cluster) label() string {
	if c.Source == "" {
		return fmt.Sprintf("cluster %q", c.Name)
	}
	return fmt.Sprintf("cluster %q (%s)", c.Name, c.Source)
}

// File is the clusters file.
type File struct {
	APIVersion string    `yaml:"apiVersion,omitempty"`
	Kind       string    `yaml:"kind,omitempty"`
	Clusters   []Cluster `yaml:"clusters"`
}

// File identifiers; both are optional in a clusters file, but checked when present.
const (
	FileAPIVersion = "prebake.dev/v1alpha1"
	FileKind       = "ClusterMesh"
)

// LoadFile reads, strictly decodes, allocates ids for and validates a clusters file.
// Clusters without an id get the lowest free one (see AssignIDs).
func LoadFile(path string) ([]Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	clusters, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	if len(clusters) == 0 {
		return nil, fmt.Errorf("%s: no clusters", path)
	}
	if err := CheckCapacity(clusters); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := AssignIDs(clusters, nil); err != nil {
		return nil, err
	}
	if err := Validate(clusters); err != nil {
		return nil, err
	}
	return clusters, nil
}

// CheckCapacity refuses more clusters than Cilium can mesh: 255 with the default
// clustermesh.maxConnectedClusters=255, 511 with 511, which must be chosen when Cilium
// is installed (Cilium v1.20.2 Documentation/network/clustermesh/setup.rst,
// "Scaling Limitations"; it cannot be changed on a running cluster). Past 255 clusters it names
// the clusters recorded as installed without maxConnectedClusters: 511.
func CheckCapacity(clusters []Cluster) error {
	n := len(clusters)
	if n > MaxConnectedClusters511 {
		return fmt.Errorf("%d clusters: Cilium meshes at most %d (maxConnectedClusters: 511, cluster ids 1..511); split them into meshes of at most %d", n, MaxConnectedClusters511, MaxConnectedClusters511)
	}
	if n <= MaxConnectedClusters255 {
		return nil
	}
	var without []string
	for _, c := range clusters {
		if c.maxConnected() != MaxConnectedClusters511 {
			without = append(without, c.Name)
		}
	}
	if len(without) == 0 {
		return nil
	}
	return fmt.Errorf("%d clusters need maxConnectedClusters: 511 (cluster ids 1..511), but %d of them are recorded as installed without it (%s): "+
		"reinstall those with the Helm value clustermesh.maxConnectedClusters=511 and set maxConnectedClusters: 511 for every cluster in the clusters file "+
		"(it is fixed at install time, cannot be migrated, and halves the cluster-local identities to 32,767), or keep the mesh at %d clusters or fewer",
		n, len(without), abbreviate(without, 8), MaxConnectedClusters255)
}

// abbreviate joins at most max names, saying how many more there are.
func abbreviate(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:max], ", ") + fmt.Sprintf(" and %d more", len(names)-max)
}

// Parse strictly decodes a clusters file: an unknown field is an error naming the
// field and its line. Each cluster's Source is set to "name:line". It does not
// validate; see Validate.
func Parse(name string, data []byte) ([]Cluster, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty clusters file", name)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if f.APIVersion != "" && f.APIVersion != FileAPIVersion {
		return nil, fmt.Errorf("%s: apiVersion %q, want %q", name, f.APIVersion, FileAPIVersion)
	}
	if f.Kind != "" && f.Kind != FileKind {
		return nil, fmt.Errorf("%s: kind %q, want %q", name, f.Kind, FileKind)
	}
	// A second pass over the node tree finds each cluster's line.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err == nil {
		lines := clusterLines(&root)
		for i := range f.Clusters {
			if i < len(lines) {
				f.Clusters[i].Source = fmt.Sprintf("%s:%d", name, lines[i])
			}
		}
	}
	return f.Clusters, nil
}

func clusterLines(root *yaml.Node) []int {
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil
	}
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "clusters" && m.Content[i+1].Kind == yaml.SequenceNode {
			var lines []int
			for _, c := range m.Content[i+1].Content {
				lines = append(lines, c.Line)
			}
			return lines
		}
	}
	return nil
}

// AssignIDs gives every cluster with ID 0 an id. A cluster named in previous keeps
// its previous id; the others get the lowest id that is free and allowed for them.
// Explicit ids are left alone, so ids stay stable when clusters are added or
// removed. Conflicts among explicit ids are Validate's business.
func AssignIDs(clusters []Cluster, previous map[string]int) error {
	used := make(map[int]bool)
	for _, c := range clusters {
		if c.ID != 0 {
			used[c.ID] = true
		}
	}
	for i := range clusters {
		c := &clusters[i]
		if c.ID != 0 {
			continue
		}
		if id, ok := previous[c.Name]; ok && id != 0 && !used[id] {
			c.ID = id
			used[id] = true
		}
	}
	for i := range clusters {
		c := &clusters[i]
		if c.ID != 0 {
			continue
		}
		for id := 1; id <= c.maxConnected(); id++ {
			if !used[id] && c.idAllowed(id) {
				c.ID = id
				used[id] = true
				break
			}
		}
		if c.ID == 0 {
			hint := "maxConnectedClusters: 511 (the Helm value clustermesh.maxConnectedClusters=511, set at install time) doubles the ids"
			if c.maxConnected() == MaxConnectedClusters511 {
				hint = "remove a cluster, or release the id of one that left (see docs/mesh.md, ids file)"
			}
			return fmt.Errorf("%s: no free cluster id in 1..%d with maxConnectedClusters %d: the mesh is full; %s", c.label(), c.maxConnected(), c.maxConnected(), hint)
		}
	}
	return nil
}

// Validate checks the clusters against Cilium's rules and returns every violation,
// each naming the clusters involved.
func Validate(clusters []Cluster) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	byName := make(map[string]Cluster)
	byID := make(map[int]Cluster)
	for _, c := range clusters {
		switch {
		case c.Name == "":
			add("%s: name is empty", c.label())
		case len(c.Name) > MaxNameLength:
			add("%s: name is %d characters, Cilium allows at most %d", c.label(), len(c.Name), MaxNameLength)
		case !nameRE.MatchString(c.Name):
			add("%s: name must be lower-case letters, digits and '-', starting and ending with a letter or digit (%s)", c.label(), nameRE)
		case c.Name == "default" && c.ID != 0:
			add("%s: Cilium forbids the name \"default\" for a cluster with a nonzero id; rename it", c.label())
		}
		if prev, ok := byName[c.Name]; ok && c.Name != "" {
			add("%s and %s: duplicate cluster name", prev.label(), c.label())
		} else {
			byName[c.Name] = c
		}

		if mc := c.maxConnected(); mc != MaxConnectedClusters255 && mc != MaxConnectedClusters511 {
			add("%s: maxConnectedClusters is %d, Cilium accepts 255 or 511", c.label(), mc)
		}
		switch {
		case c.ID < 1 || c.ID > MaxConnectedClusters511:
			add("%s: id %d is out of range 1..255 (1..511 with maxConnectedClusters: 511)", c.label(), c.ID)
		case c.ID > c.maxConnected():
			add("%s: id %d needs maxConnectedClusters: 511 (it is %d)", c.label(), c.ID, c.maxConnected())
		case c.restrictedIDs() && c.ID&0x80 != 0:
			add("%s: id %d is refused with ipamMode %q / chainingMode %q: ids 128-255 and 384-511 are not usable (cilium#21330); pick another id", c.label(), c.ID, c.IPAMMode, c.ChainingMode)
		}
		if prev, ok := byID[c.ID]; ok && c.ID != 0 {
			add("%s and %s: both use id %d; ids must be unique across the mesh", prev.label(), c.label(), c.ID)
		} else {
			byID[c.ID] = c
		}
	}

	// maxConnectedClusters is set once at install time and must match mesh-wide.
	groups := make(map[int][]string)
	for _, c := range clusters {
		groups[c.maxConnected()] = append(groups[c.maxConnected()], c.Name)
	}
	if len(groups) > 1 {
		var parts []string
		for _, mc := range slices.Sorted(maps.Keys(groups)) {
			parts = append(parts, fmt.Sprintf("%d: %s", mc, strings.Join(groups[mc], ", ")))
		}
		add("maxConnectedClusters differs across the mesh (%s); it must be equal everywhere and cannot be changed on a running cluster", strings.Join(parts, "; "))
	}

	// Pod CIDRs must not overlap.
	type cidr struct {
		c Cluster
		p netip.Prefix
	}
	var cidrs []cidr
	for _, c := range clusters {
		for _, s := range c.PodCIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				add("%s: pod CIDR %q: %v", c.label(), s, err)
				continue
			}
			cidrs = append(cidrs, cidr{c, p.Masked()})
		}
	}
	for i, x := range cidrs {
		for _, y := range cidrs[i+1:] {
			if x.p.Overlaps(y.p) {
				if x.c.Name == y.c.Name {
					add("%s: pod CIDRs %s and %s overlap", x.c.label(), x.p, y.p)
				} else {
					add("%s and %s: pod CIDRs %s and %s overlap", x.c.label(), y.c.label(), x.p, y.p)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Names returns the clusters' names in order.
func Names(clusters []Cluster) []string {
	out := make([]string, len(clusters))
	for i, c := range clusters {
		out[i] = c.Name
	}
	return out
}
