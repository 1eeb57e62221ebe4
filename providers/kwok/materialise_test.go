package kwok

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prebake-dev/prebake/providers"
)

// TestMaterialiseOnce drives one materialiser step against each state a
// machine's record and Node can be in.
func TestMaterialiseOnce(t *testing.T) {
	t.Parallel()
	deleting := testLease("m", testCluster, "pool-a", t0)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	deleting.Finalizers = []string{"example.com/hold"}
	damaged := testLease("m", testCluster, "pool-a", t0)
	damaged.Annotations[annotationNodeLabels] = "{"
	unknownType := testLease("m", testCluster, "pool-a", t0)
	unknownType.Annotations[annotationMachineType] = "retired"

	tests := []struct {
		name        string
		objs        []runtime.Object
		setup       func(cs *fake.Clientset)
		wantChanged bool
		wantErr     bool
		wantNode    bool
	}{
		{name: "booted", objs: []runtime.Object{testLease("m", testCluster, "pool-a", t0)}, wantChanged: true, wantNode: true},
		{
			name:     "node already there",
			objs:     []runtime.Object{testLease("m", testCluster, "pool-a", t0), testNode("m", testCluster, "pool-a", "kwok://m", t0)},
			wantNode: true,
		},
		{name: "record gone", objs: nil},
		{
			name:        "record gone, node left behind",
			objs:        []runtime.Object{testNode("m", testCluster, "pool-a", "kwok://m", t0)},
			wantChanged: true,
		},
		{name: "record being deleted", objs: []runtime.Object{deleting}},
		{name: "another cluster's record", objs: []runtime.Object{testLease("m", "prod", "pool-a", t0)}},
		{name: "damaged record", objs: []runtime.Object{damaged}},
		{
			name:     "name taken by another cluster's node",
			objs:     []runtime.Object{testLease("m", testCluster, "pool-a", t0), testNode("m", "prod", "pool-a", "kwok://m", t0)},
			wantNode: true,
		},
		{
			name:     "record gone, another cluster's node left alone",
			objs:     []runtime.Object{testNode("m", "prod", "pool-a", "kwok://m", t0)},
			wantNode: true,
		},
		{name: "unknown machine type", objs: []runtime.Object{unknownType}},
		{
			name: "deleted while the node was created",
			objs: []runtime.Object{testLease("m", testCluster, "pool-a", t0)},
			setup: func(cs *fake.Clientset) {
				// Delete removes the record (and finds no Node yet) between
				// the materialiser's Get and its Create.
				cs.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					if err := cs.Tracker().Delete(leasesGVR, DefaultNamespace, "m"); err != nil && !apierrors.IsNotFound(err) {
						return true, nil, err
					}
					return false, nil, nil
				})
			},
		},
		{
			name: "API error",
			objs: []runtime.Object{testLease("m", testCluster, "pool-a", t0)},
			setup: func(cs *fake.Clientset) {
				cs.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewServiceUnavailable("etcd")
				})
			},
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cs := fake.NewClientset(tc.objs...)
			if tc.setup != nil {
				tc.setup(cs)
			}
			p := newTestProvider(t, cs, nil)
			changed, err := p.materialiseOnce(t.Context(), "m", p.log)
			if (err != nil) != tc.wantErr {
				t.Fatalf("materialiseOnce error = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			gotNode, err := nodeExists(cs, "m")()
			if err != nil {
				t.Fatal(err)
			}
			if gotNode != tc.wantNode {
				t.Errorf("node exists = %v, want %v", gotNode, tc.wantNode)
			}
		})
	}
}

func TestRunRetriesNodeCreation(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	const failures = 3
	var attempts atomic.Int32
	cs.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if attempts.Add(1) <= failures {
			return true, nil, apierrors.NewTooManyRequests("slow down", 0)
		}
		return false, nil, nil
	})
	p := newTestProvider(t, cs, nil)
	startRun(t, p)
	if _, err := p.Create(t.Context(), request("m", "pool-a", "kwok-small", "zone-a", providers.ImagePrebaked)); err != nil {
		t.Fatalf("Create: %v", err)
	}
	waitFor(t, "node m", nodeExists(cs, "m"))
	if got := attempts.Load(); got != failures+1 {
		t.Errorf("%d node creations, want %d", got, failures+1)
	}
}

func TestRunRetriesResume(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset(testLease("m", testCluster, "pool-a", t0))
	var fails atomic.Int32
	fails.Store(2)
	cs.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails.Add(-1) >= 0 {
			return true, nil, apierrors.NewInternalError(errors.New("injected"))
		}
		return false, nil, nil
	})
	p := newTestProvider(t, cs, nil)
	startRun(t, p)
	waitFor(t, "node m", nodeExists(cs, "m"))
}

func TestBootQueue(t *testing.T) {
	t.Parallel()
	q := newBootQueue()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	q.add(bootItem{name: "c", due: at(3), attempt: 0})
	q.add(bootItem{name: "a", due: at(1), attempt: 0})
	q.add(bootItem{name: "b", due: at(2), attempt: 0})
	q.add(bootItem{name: "c", due: at(0), attempt: 2}) // earlier time and more attempts win
	q.add(bootItem{name: "a", due: at(9), attempt: 0}) // a later time doesn't delay a queued machine
	q.add(bootItem{name: "x", due: at(5), attempt: 0})
	q.remove("x")
	q.remove("never-queued")

	if due, ok := q.next(); !ok || !due.Equal(at(0)) {
		t.Errorf("next() = %v, %v; want %v, true", due, ok, at(0))
	}
	names := func(its []bootItem) []string {
		var out []string
		for _, it := range its {
			out = append(out, it.name)
		}
		return out
	}
	got := q.popDue(at(1))
	if diff := cmp.Diff([]string{"c", "a"}, names(got)); diff != "" {
		t.Errorf("popDue(1s) (-want +got):\n%s", diff)
	}
	if got[0].attempt != 2 {
		t.Errorf("c.attempt = %d, want 2", got[0].attempt)
	}
	if diff := cmp.Diff([]string{"b"}, names(q.popDue(at(10)))); diff != "" {
		t.Errorf("popDue(10s) (-want +got):\n%s", diff)
	}
	if _, ok := q.next(); ok || q.len() != 0 {
		t.Errorf("queue not empty: len %d", q.len())
	}
}
