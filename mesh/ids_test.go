package mesh

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckCapacity(t *testing.T) {
	t.Parallel()
	gen := func(n, mc int, except ...int) []Cluster {
		cs := make([]Cluster, n)
		for i := range cs {
			cs[i] = Cluster{Name: fmt.Sprintf("c%d", i+1), MaxConnectedClusters: mc}
		}
		for _, i := range except {
			cs[i-1].MaxConnectedClusters = 0 // the default, 255
		}
		return cs
	}
	tests := []struct {
		name     string
		clusters []Cluster
		want     []string // nil: accepted
	}{
		{"255 default", gen(255, 0), nil},
		{"256 default", gen(256, 0), []string{"256 clusters need maxConnectedClusters: 511", "256 of them are recorded as installed without it (c1, c2, c3, c4, c5, c6, c7, c8 and 248 more)", "clustermesh.maxConnectedClusters=511"}},
		{"300 with 511", gen(300, 511), nil},
		{"300, two without", gen(300, 511, 7, 200), []string{"2 of them are recorded as installed without it (c7, c200)"}},
		{"511 with 511", gen(511, 511), nil},
		{"512", gen(512, 511), []string{"512 clusters: Cilium meshes at most 511"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckCapacity(tt.clusters)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v lacks %q", err, w)
				}
			}
		})
	}
}

func TestAllocateIDs(t *testing.T) {
	t.Parallel()
	cl := func(names ...string) []Cluster {
		var out []Cluster
		for _, n := range names {
			out = append(out, Cluster{Name: n})
		}
		return out
	}
	ids := func(cs []Cluster) map[string]int {
		out := map[string]int{}
		for _, c := range cs {
			out[c.Name] = c.ID
		}
		return out
	}
	record := map[string]int{}
	cs := cl("a", "b", "c")
	got, err := AllocateIDs(cs, record, "ids")
	if err != nil || len(got) != 3 {
		t.Fatalf("allocated %v, %v", got, err)
	}
	// b leaves; d and e come, d before the others in the file.
	cs = append(cl("d"), cl("a", "c", "e")...)
	if _, err := AllocateIDs(cs, record, "ids"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"d": 4, "a": 1, "c": 3, "e": 5}, ids(cs)); diff != "" {
		t.Errorf("after b left (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, record); diff != "" {
		t.Errorf("record keeps b's id reserved (-want +got):\n%s", diff)
	}
	// An explicit id is recorded, and then held.
	cs = []Cluster{{Name: "f", ID: 9}, {Name: "a"}}
	if _, err := AllocateIDs(cs, record, "ids"); err != nil || record["f"] != 9 {
		t.Fatalf("explicit id: record %v, %v", record, err)
	}
	for _, tt := range []struct {
		clusters []Cluster
		want     string
	}{
		{[]Cluster{{Name: "a", ID: 6}}, `cluster "a": id 6, but id 1 was allocated to it (ids)`},
		{[]Cluster{{Name: "g", ID: 2}}, `cluster "g": id 2 is recorded for cluster "b" (ids)`},
	} {
		if _, err := AllocateIDs(tt.clusters, record, "ids"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("AllocateIDs(%+v): %v, want %q", tt.clusters, err, tt.want)
		}
	}
}

func TestLoadFileIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.yaml")
	idsPath := DefaultIDsPath(path)
	if idsPath != filepath.Join(dir, "mesh.ids.yaml") {
		t.Fatalf("DefaultIDsPath = %s", idsPath)
	}
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("clusters:\n  - name: x\n  - name: y\n    id: 7\n")
	cs, allocated, err := LoadFileIDs(path, idsPath)
	if err != nil || len(cs) != 2 || cs[0].ID != 1 || cs[1].ID != 7 || len(allocated) != 1 {
		t.Fatalf("first load: %+v, allocated %v, %v", cs, allocated, err)
	}
	rec, err := LoadIDs(idsPath)
	if err != nil || !cmp.Equal(rec, map[string]int{"x": 1, "y": 7}) {
		t.Fatalf("record %v, %v", rec, err)
	}
	st, _ := os.Stat(idsPath)
	// Loading again allocates nothing and leaves the file as it is.
	if _, allocated, err := LoadFileIDs(path, idsPath); err != nil || len(allocated) != 0 {
		t.Fatalf("second load: allocated %v, %v", allocated, err)
	}
	if st2, _ := os.Stat(idsPath); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("a load that allocated nothing rewrote the ids file")
	}
	// A record two clusters share is refused.
	if err := os.WriteFile(idsPath, []byte("apiVersion: prebake.dev/v1alpha1\nkind: ClusterMeshIDs\nids:\n  x: 3\n  y: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadFileIDs(path, idsPath); err == nil || !strings.Contains(err.Error(), `clusters "x" and "y" both hold id 3`) {
		t.Errorf("shared id in the record: %v", err)
	}
	if err := os.WriteFile(idsPath, []byte("kind: Other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadFileIDs(path, idsPath); err == nil || !strings.Contains(err.Error(), `want "ClusterMeshIDs"`) {
		t.Errorf("wrong kind: %v", err)
	}
}
