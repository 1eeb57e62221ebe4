package mesh

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func helmClusters() []Cluster {
	return []Cluster{
		{Name: "eu-1", ID: 1, ClusterMeshAPIServer: "172.18.0.2:32379"},
		{Name: "us-1", ID: 2, ClusterMeshAPIServer: "mesh.us-1.example.com:2379"},
		{Name: "ap-1", ID: 3, ClusterMeshAPIServer: "[fd00::3]:32379"},
		{Name: "sa-1", ID: 4, ClusterMeshAPIServer: "172.18.0.5:32379"},
	}
}

func TestHelmValuesApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	clusters := helmClusters()
	b := NewHelmValues(dir, clusters)
	e := &Executor{Backoff: noBackoff}

	// Three clusters: three files, one write each.
	names := Names(clusters[:3])
	res, err := e.Declarative(ctx, b, names, FullMesh(names...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 3 || res.Rounds != 1 {
		t.Errorf("first apply: %+v", res)
	}
	got, err := os.ReadFile(filepath.Join(dir, "eu-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := helmValuesHeader + `cluster:
  name: eu-1
  id: 1
clustermesh:
  useAPIServer: true
  config:
    enabled: true
    clusters:
      ap-1:
        ips:
          - fd00::3
        port: 32379
      us-1:
        address: mesh.us-1.example.com
        port: 2379
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("eu-1.yaml (-want +got):\n%s", diff)
	}
	peers, err := b.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"eu-1": {"ap-1", "us-1"}, "us-1": {"ap-1", "eu-1"}, "ap-1": {"eu-1", "us-1"}}, peers); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}

	// Add sa-1: four writes (three append it, sa-1 gets the full list).
	all := Names(clusters)
	if res, err = e.Declarative(ctx, b, all, FullMesh(all...)); err != nil || res.Ops != 4 {
		t.Fatalf("add: %+v, %v", res, err)
	}
	// Re-applying writes nothing.
	if res, err = e.Declarative(ctx, b, all, FullMesh(all...)); err != nil || res.Ops != 0 {
		t.Fatalf("re-apply: %+v, %v", res, err)
	}
	// Remove us-1: only the three that remain are written.
	stat := func(name string) os.FileInfo {
		fi, err := os.Stat(filepath.Join(dir, name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	before := stat("us-1")
	remain := []string{"eu-1", "ap-1", "sa-1"}
	if res, err = e.Declarative(ctx, b, remain, FullMesh(remain...)); err != nil || res.Ops != 3 {
		t.Fatalf("remove: %+v, %v", res, err)
	}
	if after := stat("us-1"); !after.ModTime().Equal(before.ModTime()) {
		t.Error("the leaving cluster's file was rewritten")
	}
	g, err := b.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(FullMesh(remain...).Pairs(), g.Pairs()); diff != "" {
		t.Errorf("connections (-want +got):\n%s", diff)
	}
}

func TestHelmValuesErrors(t *testing.T) {
	t.Parallel()
	clusters := append(helmClusters(), Cluster{Name: "no-endpoint", ID: 9}, Cluster{Name: "bad-port", ID: 10, ClusterMeshAPIServer: "1.2.3.4:x"})
	b := NewHelmValues(t.TempDir(), clusters)
	tests := []struct {
		cluster string
		peers   []string
		want    string
	}{
		{"eu-1", []string{"no-endpoint"}, `cluster "eu-1": peer cluster "no-endpoint": clustermeshAPIServer is not set`},
		{"eu-1", []string{"bad-port"}, `clustermeshAPIServer "1.2.3.4:x": bad port`},
		{"eu-1", []string{"nope"}, `peer "nope" is not in the clusters file`},
		{"nope", nil, `cluster "nope" is not in the clusters file`},
	}
	for _, tt := range tests {
		if _, err := b.Values(tt.cluster, tt.peers); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Values(%s, %v): %v, want %q", tt.cluster, tt.peers, err, tt.want)
		}
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clusters := helmClusters()
	var out bytes.Buffer
	d := &DryRun{Backend: NewHelmValues(dir, clusters), Out: &out}
	names := Names(clusters)
	res, err := (&Executor{Parallel: 1}).Declarative(context.Background(), d, names, FullMesh(names...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 4 {
		t.Errorf("result %+v", res)
	}
	want := `dry-run: would set ap-1 peers to [eu-1 sa-1 us-1]
dry-run: would set eu-1 peers to [ap-1 sa-1 us-1]
dry-run: would set sa-1 peers to [ap-1 eu-1 us-1]
dry-run: would set us-1 peers to [ap-1 eu-1 sa-1]
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("dry-run output (-want +got):\n%s", diff)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("dry run wrote %d files", len(entries))
	}
}
