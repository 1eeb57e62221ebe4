package mesh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := func(name string, id int) Cluster { return Cluster{Name: name, ID: id, Source: "f:1"} }
	tests := []struct {
		name     string
		clusters []Cluster
		wantErrs []string // substrings, one per expected error; nil means valid
	}{
		{"valid", []Cluster{ok("a", 1), ok("b-2", 2), {Name: strings.Repeat("x", 32), ID: 3}}, nil},
		{"empty name", []Cluster{ok("", 1)}, []string{`cluster "" (f:1): name is empty`}},
		{"name too long", []Cluster{ok(strings.Repeat("x", 33), 1)}, []string{"name is 33 characters, Cilium allows at most 32"}},
		{"upper case", []Cluster{ok("Prod", 1)}, []string{`cluster "Prod" (f:1): name must be lower-case`}},
		{"leading dash", []Cluster{ok("-a", 1)}, []string{"name must be lower-case"}},
		{"trailing dash", []Cluster{ok("a-", 1)}, []string{"name must be lower-case"}},
		{"dot", []Cluster{ok("a.b", 1)}, []string{"name must be lower-case"}},
		{"default", []Cluster{ok("default", 1)}, []string{`forbids the name "default"`}},
		{"duplicate name", []Cluster{{Name: "a", ID: 1, Source: "f:2"}, {Name: "a", ID: 2, Source: "f:5"}}, []string{`cluster "a" (f:2) and cluster "a" (f:5): duplicate cluster name`}},
		{"id 0", []Cluster{ok("a", 0)}, []string{"id 0 is out of range"}},
		{"id 256 needs 511", []Cluster{ok("a", 256)}, []string{"id 256 needs maxConnectedClusters: 511"}},
		{"id 511 with 511", []Cluster{{Name: "a", ID: 511, MaxConnectedClusters: 511}}, nil},
		{"id 512", []Cluster{{Name: "a", ID: 512, MaxConnectedClusters: 511}}, []string{"id 512 is out of range"}},
		{"max 300", []Cluster{{Name: "a", ID: 1, MaxConnectedClusters: 300}}, []string{"maxConnectedClusters is 300, Cilium accepts 255 or 511"}},
		{"duplicate id", []Cluster{ok("a", 7), ok("b", 7)}, []string{`cluster "a" (f:1) and cluster "b" (f:1): both use id 7`}},
		{"eni 127 ok", []Cluster{{Name: "a", ID: 127, IPAMMode: IPAMModeENI}}, nil},
		{"eni 128", []Cluster{{Name: "a", ID: 128, IPAMMode: IPAMModeENI}}, []string{`id 128 is refused with ipamMode "eni"`}},
		{"alibaba 255", []Cluster{{Name: "a", ID: 255, IPAMMode: IPAMModeAlibabaCloud}}, []string{"id 255 is refused"}},
		{"aws-cni 384", []Cluster{{Name: "a", ID: 384, ChainingMode: ChainingModeAWSCNI, MaxConnectedClusters: 511}}, []string{"id 384 is refused"}},
		{"aws-cni 383 ok", []Cluster{{Name: "a", ID: 383, ChainingMode: ChainingModeAWSCNI, MaxConnectedClusters: 511}}, nil},
		{"cluster-pool 128 ok", []Cluster{{Name: "a", ID: 128, IPAMMode: "cluster-pool"}}, nil},
		{"max differs", []Cluster{ok("a", 1), {Name: "b", ID: 2, MaxConnectedClusters: 511}, ok("c", 3)},
			[]string{"maxConnectedClusters differs across the mesh (255: a, c; 511: b)"}},
		{"cidr overlap", []Cluster{
			{Name: "a", ID: 1, PodCIDRs: []string{"10.0.0.0/16"}},
			{Name: "b", ID: 2, PodCIDRs: []string{"10.1.0.0/16", "10.0.128.0/17"}},
		}, []string{`cluster "a" and cluster "b": pod CIDRs 10.0.0.0/16 and 10.0.128.0/17 overlap`}},
		{"cidr v6 disjoint", []Cluster{
			{Name: "a", ID: 1, PodCIDRs: []string{"fd00:1::/64", "10.0.0.0/16"}},
			{Name: "b", ID: 2, PodCIDRs: []string{"fd00:2::/64", "10.1.0.0/16"}},
		}, nil},
		{"bad cidr", []Cluster{{Name: "a", ID: 1, PodCIDRs: []string{"10.0.0.0/33"}}}, []string{`cluster "a": pod CIDR "10.0.0.0/33"`}},
		{"several errors", []Cluster{ok("A", 0), ok("b", 1000)}, []string{"name must be", "id 0 is out of range", "id 1000 is out of range"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Validate(tt.clusters)
			if tt.wantErrs == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate succeeded, want errors %q", tt.wantErrs)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.wantErrs) {
				t.Errorf("got %d errors, want %d:\n%v", len(lines), len(tt.wantErrs), err)
			}
			for _, want := range tt.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestAssignIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		clusters []Cluster
		previous map[string]int
		want     []int
		wantErr  string
	}{
		{"lowest free", []Cluster{{Name: "a"}, {Name: "b", ID: 1}, {Name: "c"}}, nil, []int{2, 1, 3}, ""},
		{"previous kept", []Cluster{{Name: "new"}, {Name: "old"}}, map[string]int{"old": 9}, []int{1, 9}, ""},
		{"previous taken by explicit", []Cluster{{Name: "a", ID: 9}, {Name: "old"}}, map[string]int{"old": 9}, []int{9, 1}, ""},
		{"removal keeps ids", []Cluster{{Name: "c"}, {Name: "a"}}, map[string]int{"a": 1, "b": 2, "c": 3}, []int{3, 1}, ""},
		{"eni skips 128..255", func() []Cluster {
			cs := make([]Cluster, 128)
			for i := range cs {
				cs[i] = Cluster{Name: "x" + string(rune('a'+i%26)) + string(rune('a'+i/26)), IPAMMode: IPAMModeENI}
			}
			return cs
		}(), nil, nil, "no free cluster id in 1..255"},
		{"eni 511 skips to 256", func() []Cluster {
			cs := []Cluster{{Name: "z", ID: 127, IPAMMode: IPAMModeENI, MaxConnectedClusters: 511}}
			for i := 1; i < 127; i++ {
				cs = append(cs, Cluster{Name: "x", ID: i, IPAMMode: IPAMModeENI, MaxConnectedClusters: 511})
			}
			return append(cs, Cluster{Name: "last", IPAMMode: IPAMModeENI, MaxConnectedClusters: 511})
		}(), nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := AssignIDs(tt.clusters, tt.previous)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("AssignIDs error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if got := tt.clusters[len(tt.clusters)-1].ID; got != 256 {
					t.Errorf("last id %d, want 256", got)
				}
				return
			}
			got := make([]int, len(tt.clusters))
			for i, c := range tt.clusters {
				got[i] = c.ID
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseAndLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `apiVersion: prebake.dev/v1alpha1
kind: ClusterMesh
clusters:
  - name: eu-1
    context: kind-eu-1
    clustermeshAPIServer: 172.18.0.2:32379
    podCIDRs: [10.1.0.0/16]
  - name: us-1
    id: 1
    apiServer: https://172.18.0.3:6443
    podCIDRs: [10.2.0.0/16]
`)
	got, err := LoadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	want := []Cluster{
		{Name: "eu-1", ID: 2, Context: "kind-eu-1", ClusterMeshAPIServer: "172.18.0.2:32379", PodCIDRs: []string{"10.1.0.0/16"}, Source: good + ":4"},
		{Name: "us-1", ID: 1, APIServer: "https://172.18.0.3:6443", PodCIDRs: []string{"10.2.0.0/16"}, Source: good + ":8"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadFile (-want +got):\n%s", diff)
	}

	tests := []struct {
		name, body, wantErr string
	}{
		{"unknown field", "clusters:\n  - name: a\n    podCIDR: 10.0.0.0/8\n", "bad.yaml: yaml: unmarshal errors:\n  line 3: field podCIDR not found"},
		{"wrong kind", "kind: Mesh\nclusters: []\n", `kind "Mesh", want "ClusterMesh"`},
		{"empty", "", "empty clusters file"},
		{"no clusters", "clusters: []\n", "bad.yaml: no clusters"},
		{"invalid cluster names line", "clusters:\n  - name: a\n    id: 3\n  - name: B\n", `cluster "B" (` + filepath.Join(dir, "bad.yaml") + `:4): name must be`},
		{"duplicate ids name both lines", "clusters:\n  - name: a\n    id: 3\n  - name: b\n    id: 3\n", `cluster "a" (` + filepath.Join(dir, "bad.yaml") + `:2) and cluster "b" (` + filepath.Join(dir, "bad.yaml") + `:4): both use id 3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := write("bad.yaml", tt.body) // sequential: shares the file name
			_, err := LoadFile(p)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("LoadFile error:\n%v\nwant it to contain:\n%s", err, tt.wantErr)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("clusters:\n  - name: a\n    id: 1\n    podCIDRs: [10.0.0.0/8]\n"))
	f.Add([]byte("kind: ClusterMesh\nclusters: [{name: b, maxConnectedClusters: 511}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		clusters, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		if AssignIDs(clusters, nil) == nil {
			_ = Validate(clusters)
		}
	})
}
