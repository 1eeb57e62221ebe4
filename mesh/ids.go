package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A cluster's id is fixed when Cilium is installed (cluster.id), so once allocated it must
// never change: not when other clusters are added, and not when clusters leave. The ids
// file records every id allocated, including those of clusters that left, which stay
// reserved: peers may still hold state (identities, cached entries) tagged with the old
// id, so handing it to a new cluster would make them mistake one for the other.

// IDsFileVersion heads an ids file.
const IDsFileVersion = "prebake.dev/v1alpha1"

type idsFile struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	// IDs maps every cluster ever allocated an id to it.
	IDs map[string]int `yaml:"ids"`
}

const idsFileKind = "ClusterMeshIDs"

// DefaultIDsPath is where the ids of a clusters file are recorded unless told otherwise:
// beside it, clusters.yaml → clusters.ids.yaml.
func DefaultIDsPath(clustersFile string) string {
	ext := filepath.Ext(clustersFile)
	return strings.TrimSuffix(clustersFile, ext) + ".ids.yaml"
}

// LoadIDs reads an ids file; a missing file is an empty record.
func LoadIDs(path string) (map[string]int, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f idsFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Kind != idsFileKind {
		return nil, fmt.Errorf("%s: kind %q, want %q (the ids file prebake mesh writes)", path, f.Kind, idsFileKind)
	}
	byID := map[int]string{}
	for _, n := range slices.Sorted(maps.Keys(f.IDs)) {
		id := f.IDs[n]
		if id < 1 || id > MaxConnectedClusters511 {
			return nil, fmt.Errorf("%s: cluster %q: id %d is out of range 1..511", path, n, id)
		}
		if other, dup := byID[id]; dup {
			return nil, fmt.Errorf("%s: clusters %q and %q both hold id %d; ids are allocated once: remove the line of the one that is not installed with it", path, other, n, id)
		}
		byID[id] = n
	}
	if f.IDs == nil {
		f.IDs = map[string]int{}
	}
	return f.IDs, nil
}

// SaveIDs writes the record atomically (a temporary file renamed over the old one).
func SaveIDs(path string, ids map[string]int) error {
	var b bytes.Buffer
	b.WriteString("# Cluster ids allocated by prebake mesh. An id is fixed when Cilium is installed\n" +
		"# (cluster.id), so it is never changed or reused: the ids of clusters that left stay\n" +
		"# reserved. Delete a line only for a cluster that will never come back. See docs/mesh.md.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(idsFile{APIVersion: IDsFileVersion, Kind: idsFileKind, IDs: ids}); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("record cluster ids: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("record cluster ids in %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("record cluster ids in %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("record cluster ids in %s: %w", path, err)
	}
	return nil
}

// AllocateIDs gives every cluster without an id one, consistently with record (the ids
// allocated before, by name), and adds the new ones to record. A recorded cluster gets its
// recorded id; a new one the lowest id that is free, allowed for it and not recorded for
// any other cluster (present or gone). It refuses a cluster whose explicit id differs
// from its recorded one, or takes one recorded for another cluster: the id of an
// installed cluster cannot change. It returns the names allocated an id now.
func AllocateIDs(clusters []Cluster, record map[string]int, recordPath string) ([]string, error) {
	owner := make(map[int]string, len(record))
	for n, id := range record {
		owner[id] = n
	}
	var errs []error
	for _, c := range clusters {
		if c.ID == 0 {
			continue
		}
		if rec, ok := record[c.Name]; ok && rec != c.ID {
			errs = append(errs, fmt.Errorf("%s: id %d, but id %d was allocated to it (%s); a cluster's id is fixed at install time: set id: %d, or, if the cluster was reinstalled with id %d, change its line in %s", c.label(), c.ID, rec, recordPath, rec, c.ID, recordPath))
			continue
		}
		if o, ok := owner[c.ID]; ok && o != c.Name {
			errs = append(errs, fmt.Errorf("%s: id %d is recorded for cluster %q (%s), which may still be known to its peers by it; pick another id, or delete %q's line if it will never come back", c.label(), c.ID, o, recordPath, o))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	used := make(map[int]bool)
	for id := range owner {
		used[id] = true
	}
	for _, c := range clusters {
		if c.ID != 0 {
			used[c.ID] = true
		}
	}
	var allocated []string
	for i := range clusters {
		c := &clusters[i]
		if c.ID == 0 {
			if id, ok := record[c.Name]; ok {
				c.ID = id
			}
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
			return nil, fmt.Errorf("%s: no free cluster id in 1..%d with maxConnectedClusters %d (%d are recorded in %s, including clusters that left): the mesh is full", c.label(), c.maxConnected(), c.maxConnected(), len(record), recordPath)
		}
		allocated = append(allocated, c.Name)
	}
	for _, c := range clusters {
		if _, ok := record[c.Name]; !ok {
			record[c.Name] = c.ID
		}
	}
	return allocated, nil
}

// LoadFileIDs is LoadFile with the ids recorded in idsPath: clusters without an id get the
// one recorded for them, or a new one that is then recorded (the file is rewritten only
// when an id was allocated). It returns the clusters and the names allocated an id now.
func LoadFileIDs(path, idsPath string) ([]Cluster, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	clusters, err := Parse(path, data)
	if err != nil {
		return nil, nil, err
	}
	if len(clusters) == 0 {
		return nil, nil, fmt.Errorf("%s: no clusters", path)
	}
	if err := CheckCapacity(clusters); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	record, err := LoadIDs(idsPath)
	if err != nil {
		return nil, nil, err
	}
	before := len(record)
	allocated, err := AllocateIDs(clusters, record, idsPath)
	if err != nil {
		return nil, nil, err
	}
	if err := Validate(clusters); err != nil {
		return nil, nil, err
	}
	// Explicit ids are recorded too, so they stay reserved once their cluster leaves.
	if len(record) != before {
		if err := SaveIDs(idsPath, record); err != nil {
			return nil, nil, err
		}
	}
	return clusters, allocated, nil
}
