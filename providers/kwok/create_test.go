package kwok

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prebake-dev/prebake/providers"
)

func countLeases(t *testing.T, cs *fake.Clientset) int {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(DefaultNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list leases: %v", err)
	}
	return len(l.Items)
}

func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	p := newTestProvider(t, cs, nil)
	req := request("pool-a-1", "pool-a", "kwok-small", "zone-a", providers.ImageRuntimeInstall)

	first, err := p.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	const retries = 8
	got := make([]providers.Instance, retries)
	errs := make([]error, retries)
	var wg sync.WaitGroup
	for i := range retries {
		wg.Go(func() { got[i], errs[i] = p.Create(t.Context(), req) })
	}
	wg.Wait()
	for i := range retries {
		if errs[i] != nil {
			t.Errorf("retry %d: %v", i, errs[i])
			continue
		}
		if diff := cmp.Diff(first, got[i]); diff != "" {
			t.Errorf("retry %d returned another instance (-first +retry):\n%s", i, diff)
		}
	}
	if n := countLeases(t, cs); n != 1 {
		t.Errorf("%d leases after %d Creates of one name, want 1", n, retries+1)
	}
}

func TestCreateConcurrentFirstCreates(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	p := newTestProvider(t, cs, nil)
	req := request("pool-a-1", "pool-a", "kwok-small", "zone-a", providers.ImageRuntimeInstall)
	const n = 8
	got := make([]providers.Instance, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			if got[i], err = p.Create(t.Context(), req); err != nil {
				t.Errorf("Create %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if diff := cmp.Diff(got[0], got[i]); diff != "" {
			t.Errorf("Create %d differs from Create 0:\n%s", i, diff)
		}
	}
	if c := countLeases(t, cs); c != 1 {
		t.Errorf("%d leases, want 1", c)
	}
}

func TestCreateCapacity(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	p := newTestProvider(t, cs, func(o *Options) {
		o.Capacity = map[string]int{"zone-a": 1, "zone-b": 0}
	})
	ctx := t.Context()
	create := func(name, zone string) error {
		_, err := p.Create(ctx, request(name, "pool-a", "kwok-small", zone, providers.ImagePrebaked))
		return err
	}
	wantFull := func(err error, zone, limit string) {
		t.Helper()
		if err == nil {
			t.Fatalf("Create in full %s: nil error", zone)
		}
		want := providers.Classification{Class: providers.ErrorOutOfResources, Code: "resource_unavailable"}
		if diff := cmp.Diff(want, p.Classify(err)); diff != "" {
			t.Errorf("Classify(%v) (-want +got):\n%s", err, diff)
		}
		for _, s := range []string{`"` + zone + `"`, "at most " + limit} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("capacity error %q doesn't mention %s", err, s)
			}
		}
	}

	if err := create("a-1", "zone-a"); err != nil {
		t.Fatalf("first machine in zone-a: %v", err)
	}
	wantFull(create("a-2", "zone-a"), "zone-a", "1")
	if err := create("a-1", "zone-a"); err != nil {
		t.Errorf("retry of a machine in a full zone: %v", err)
	}
	wantFull(create("b-1", "zone-b"), "zone-b", "0")
	if err := create("c-1", "zone-c"); err != nil {
		t.Errorf("zone without a limit: %v", err)
	}
	if err := p.Delete(ctx, "kwok://a-1"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := create("a-2", "zone-a"); err != nil {
		t.Errorf("zone-a after its machine was deleted: %v", err)
	}
}

func TestCreateCapacityUnderConcurrency(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	p := newTestProvider(t, cs, func(o *Options) { o.Capacity = map[string]int{"zone-a": 3} })
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, full := 0, 0
	for i := range 10 {
		wg.Go(func() {
			_, err := p.Create(t.Context(), request("m-"+string(rune('a'+i)), "pool-a", "kwok-small", "zone-a", providers.ImagePrebaked))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case p.Classify(err).Class == providers.ErrorOutOfResources:
				full++
			default:
				t.Errorf("Create: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != 3 || full != 7 {
		t.Errorf("10 concurrent Creates into a zone of 3: %d created, %d full; want 3, 7", ok, full)
	}
}

func TestCreateRejectsBadRequests(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), nil)
	valid := func() providers.CreateRequest {
		return request("m-1", "pool-a", "kwok-small", "zone-a", providers.ImagePrebaked)
	}
	tests := []struct {
		name    string
		mod     func(*providers.CreateRequest)
		wantErr []string
	}{
		{name: "unknown machine type", mod: func(r *providers.CreateRequest) { r.MachineType = "m5.large" },
			wantErr: []string{`"m5.large"`, "kwok-gpu, kwok-large, kwok-medium, kwok-small"}},
		{name: "bad name", mod: func(r *providers.CreateRequest) { r.Name = "M_1" }, wantErr: []string{`"M_1"`, "DNS-1123"}},
		{name: "name too long for a label", mod: func(r *providers.CreateRequest) { r.Name = strings.Repeat("a", 64) },
			wantErr: []string{providers.LabelHostname}},
		{name: "no group", mod: func(r *providers.CreateRequest) { r.Group = "" }, wantErr: []string{"has no group"}},
		{name: "other cluster", mod: func(r *providers.CreateRequest) { r.Cluster = "prod" }, wantErr: []string{`cluster "prod"`, `"test"`}},
		{name: "unknown image kind", mod: func(r *providers.CreateRequest) { r.ImageKind = "golden" }, wantErr: []string{`image kind "golden"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := valid()
			tc.mod(&req)
			_, err := p.Create(t.Context(), req)
			if err == nil {
				t.Fatal("Create: nil error")
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q doesn't contain %s", err, s)
				}
			}
			if c := p.Classify(err); c.Retryable || c.Class != providers.ErrorOther {
				t.Errorf("Classify = %+v, want a non-retryable Other", c)
			}
		})
	}
}

func TestCreateAPIErrors(t *testing.T) {
	t.Parallel()
	leases := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	tests := []struct {
		name string
		err  error
		want providers.Classification
	}{
		{name: "429", err: apierrors.NewTooManyRequests("slow down", 1), want: providers.Classification{Class: providers.ErrorOther, Code: "api_429", Retryable: true}},
		{name: "500", err: apierrors.NewInternalError(context.Canceled), want: providers.Classification{Class: providers.ErrorOther, Code: "api_5xx", Retryable: true}},
		{name: "503", err: apierrors.NewServiceUnavailable("etcd"), want: providers.Classification{Class: providers.ErrorOther, Code: "api_5xx", Retryable: true}},
		{name: "504", err: apierrors.NewTimeoutError("slow", 1), want: providers.Classification{Class: providers.ErrorOther, Code: "timeout", Retryable: true}},
		{name: "403", err: apierrors.NewForbidden(leases, "m-1", context.Canceled), want: providers.Classification{Class: providers.ErrorOther, Code: "create_failed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cs := fake.NewClientset()
			cs.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			p := newTestProvider(t, cs, nil)
			_, err := p.Create(t.Context(), request("m-1", "pool-a", "kwok-small", "zone-a", providers.ImagePrebaked))
			if err == nil {
				t.Fatal("Create: nil error")
			}
			if diff := cmp.Diff(tc.want, p.Classify(err)); diff != "" {
				t.Errorf("Classify(%v) (-want +got):\n%s", err, diff)
			}
			if n := p.queue.len(); n != 0 {
				t.Errorf("%d machines queued to boot after a failed Create, want 0", n)
			}
			if c := countLeases(t, cs); c != 0 {
				t.Errorf("%d leases after a failed Create, want 0", c)
			}
		})
	}
}

// TestCreateMakesNamespace plays the API server's part: a Lease can't be
// created in a namespace that doesn't exist.
func TestCreateMakesNamespace(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ns := a.GetNamespace()
		if _, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("namespaces"), "", ns); apierrors.IsNotFound(err) {
			return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), ns)
		}
		return false, nil, nil
	})
	p := newTestProvider(t, cs, func(o *Options) { o.Namespace = "machines" })
	if _, err := p.Create(t.Context(), request("m-1", "pool-a", "kwok-small", "zone-a", providers.ImagePrebaked)); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "machines", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace: %v", err)
	}
	if _, err := cs.CoordinationV1().Leases("machines").Get(t.Context(), "m-1", metav1.GetOptions{}); err != nil {
		t.Errorf("lease: %v", err)
	}
}
