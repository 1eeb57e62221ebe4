package mesh

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	members := []string{"c3", "c1", "c2"}
	configured := map[string][]string{
		"c1": {"c3", "c2"},
		"c2": {"c1", "c9"},
	}
	got := Status(members, FullMesh(members...), configured)
	want := []ClusterStatus{
		{Cluster: "c1", Configured: []string{"c2", "c3"}},
		{Cluster: "c2", Configured: []string{"c1", "c9"}, Missing: []string{"c3"}, Extra: []string{"c9"}},
		{Cluster: "c3", Missing: []string{"c1", "c2"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	if err := WriteStatus(&out, got); err != nil {
		t.Fatal(err)
	}
	wantOut := `CLUSTER  CONFIGURED  MISSING  EXTRA
c1       2           -        -
c2       2           c3       c9
c3       0           c1,c2    -
2 of 3 clusters need a write: run prebake mesh apply
`
	if diff := cmp.Diff(wantOut, out.String()); diff != "" {
		t.Errorf("WriteStatus (-want +got):\n%s", diff)
	}
}
