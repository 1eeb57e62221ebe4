package kwok

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/providers"
)

func TestDeleteRejectsBadProviderIDs(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), nil)
	for _, id := range []string{"", "hcloud://1", "kwok://", "kwok://Bad_Name"} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			err := p.Delete(t.Context(), id)
			if err == nil {
				t.Fatalf("Delete(%q): nil error", id)
			}
			if !strings.Contains(err.Error(), "providerID") {
				t.Errorf("Delete(%q) error %q doesn't say the providerID is wrong", id, err)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		objs []runtime.Object
		id   string
		// What must remain afterwards.
		wantLease, wantNode bool
	}{
		{name: "nothing there", id: "kwok://gone"},
		{
			name: "booting",
			objs: []runtime.Object{testLease("m", testCluster, "pool-a", t0)},
			id:   "kwok://m",
		},
		{
			name: "running",
			objs: []runtime.Object{testLease("m", testCluster, "pool-a", t0), testNode("m", testCluster, "pool-a", "kwok://m", t0)},
			id:   "kwok://m",
		},
		{
			name: "node without record",
			objs: []runtime.Object{testNode("m", testCluster, "pool-a", "kwok://m", t0)},
			id:   "kwok://m",
		},
		{
			name:      "another cluster's machine is left alone",
			objs:      []runtime.Object{testLease("m", "prod", "pool-a", t0), testNode("m", "prod", "pool-a", "kwok://m", t0)},
			id:        "kwok://m",
			wantLease: true, wantNode: true,
		},
		{
			name:     "our record, another cluster's node of the same name",
			objs:     []runtime.Object{testLease("m", testCluster, "pool-a", t0), testNode("m", "prod", "pool-a", "kwok://m", t0)},
			id:       "kwok://m",
			wantNode: true,
		},
		{
			name:     "a node of this cluster that isn't kwok's is left alone",
			objs:     []runtime.Object{testNode("m", testCluster, "pool-a", "hcloud://7", t0)},
			id:       "kwok://m",
			wantNode: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cs := fake.NewClientset(tc.objs...)
			p := newTestProvider(t, cs, nil)
			p.queue.add(bootItem{name: "m", due: t0})
			for i := range 2 {
				if err := p.Delete(t.Context(), tc.id); err != nil {
					t.Fatalf("Delete #%d: %v", i+1, err)
				}
			}
			_, err := cs.CoordinationV1().Leases(DefaultNamespace).Get(t.Context(), "m", metav1.GetOptions{})
			if gotLease := !apierrors.IsNotFound(err); gotLease != tc.wantLease {
				t.Errorf("lease remains = %v (err %v), want %v", gotLease, err, tc.wantLease)
			}
			_, err = cs.CoreV1().Nodes().Get(t.Context(), "m", metav1.GetOptions{})
			if gotNode := !apierrors.IsNotFound(err); gotNode != tc.wantNode {
				t.Errorf("node remains = %v (err %v), want %v", gotNode, err, tc.wantNode)
			}
			if p.queue.len() != 0 && tc.id == "kwok://m" {
				t.Error("the deleted machine is still queued to boot")
			}
		})
	}
}

// TestDeleteBeforeBootEnds: a machine deleted while booting never gets a
// Node, and the core sees it go.
func TestDeleteBeforeBootEnds(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	p := newTestProvider(t, cs, nil)
	startRun(t, p)
	// Run first resumes the machines recorded before it: a resume that listed m's record
	// after Create would queue m again behind Delete, and the queue is this test's check.
	waitFor(t, "Run's resume to list the records", func() (bool, error) {
		for _, a := range cs.Actions() {
			if a.GetVerb() == "list" && a.GetResource() == leasesGVR {
				return true, nil
			}
		}
		return false, nil
	})
	if _, err := p.Create(t.Context(), request("m", "pool-a", "kwok-small", "zone-a", providers.ImageRuntimeInstall)); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := p.Delete(t.Context(), "kwok://m"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := listInstances(t, p); len(got) != 0 {
		t.Errorf("List after Delete = %v, want none", got)
	}
	if n := p.queue.len(); n != 0 {
		t.Errorf("%d machines queued after Delete, want 0", n)
	}
}
