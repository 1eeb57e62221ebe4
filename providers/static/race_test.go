package static

import (
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/static/statictest"
)

// TestReplicasRaceForClaims runs two provider replicas, each with its own
// connection to a real API server, against one pool of n machines with n+k
// concurrent scale-ups. The API server's create-or-AlreadyExists decides
// every race: each machine is claimed and bootstrapped exactly once, and
// exactly k requests fail with OutOfResources. client-go's fake clientset
// can't show this (it enforces no resourceVersion), hence the real server.
func TestReplicasRaceForClaims(t *testing.T) {
	t.Parallel()
	rc := statictest.StartCluster(t).Config
	const n, k, rounds = 6, 4, 3
	for round := range rounds {
		ns := fmt.Sprintf("race-%d", round)
		shells := []*fakeShell{newFakeShell(), newFakeShell()}
		replicas := make([]*Provider, 2)
		for i := range replicas {
			client, err := kubernetes.NewForConfig(rc) // one connection each, like two pods
			if err != nil {
				t.Fatal(err)
			}
			replicas[i] = newTestProvider(t, client, shells[i], pool(n), func(o *Options) { o.Namespace = ns })
		}

		type result struct {
			in  providers.Instance
			err error
		}
		results := make([]result, n+k)
		var wg sync.WaitGroup
		for i := range n + k {
			wg.Go(func() {
				p := replicas[i%2]
				in, err := p.Create(t.Context(), request(fmt.Sprintf("race-%d", i), "metal"))
				results[i] = result{in, err}
			})
		}
		wg.Wait()

		claimed := map[string]string{} // providerID → machine name
		full := 0
		for i, r := range results {
			switch {
			case r.err == nil:
				if prev, dup := claimed[r.in.ProviderID]; dup {
					t.Errorf("round %d: %s claimed twice, by %s and race-%d", round, r.in.ProviderID, prev, i)
				}
				claimed[r.in.ProviderID] = r.in.Name
			case replicas[0].Classify(r.err).Class == providers.ErrorOutOfResources:
				full++
			default:
				t.Errorf("round %d: Create race-%d: %v", round, i, r.err)
			}
		}
		if len(claimed) != n || full != k {
			t.Errorf("round %d: %d machines claimed and %d OutOfResources; want %d and %d", round, len(claimed), full, n, k)
		}
		for _, m := range pool(n) {
			if runs := len(shells[0].scripts(m.Host)) + len(shells[1].scripts(m.Host)); runs != 1 {
				t.Errorf("round %d: %s was bootstrapped %d times, want once", round, m.Host, runs)
			}
		}
		t.Logf("round %d: the API server refused %d claim creates (AlreadyExists): the races were real", round, replicas[0].lostRaces.Load()+replicas[1].lostRaces.Load())
		// Both replicas see the same machines, from the cluster alone.
		for i, p := range replicas {
			listed, err := p.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, in := range listed {
				got[in.ProviderID] = in.Name
			}
			if diff := cmp.Diff(claimed, got); diff != "" {
				t.Errorf("round %d: replica %d lists (-claimed +listed):\n%s", round, i, diff)
			}
		}
	}
}

// TestClaimUpdateNeedsFreshResourceVersion: a replica acting on a stale copy
// of a claim gets a conflict from the API server, not a silent overwrite,
// and Classify makes it a retry.
func TestClaimUpdateNeedsFreshResourceVersion(t *testing.T) {
	t.Parallel()
	rc := statictest.StartCluster(t).Config
	replicas := make([]*Provider, 2)
	for i := range replicas {
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = newTestProvider(t, client, newFakeShell(), pool(1), nil)
	}
	in, err := replicas[0].Create(t.Context(), request("metal-1", "metal"))
	if err != nil {
		t.Fatal(err)
	}
	leases := replicas[1].client.CoordinationV1().Leases(DefaultNamespace)
	stale, err := leases.Get(t.Context(), "host-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := replicas[0].Delete(t.Context(), in.ProviderID); err != nil {
		t.Fatal(err)
	}
	if _, err := replicas[0].Create(t.Context(), request("metal-2", "metal")); err != nil {
		t.Fatal(err)
	}
	// replicas[1] still holds the first claim's copy: moving it to
	// releasing must not touch the new claim.
	_, err = replicas[1].setPhase(t.Context(), stale, phaseReleasing)
	if !apierrors.IsConflict(err) {
		t.Fatalf("update of a stale claim: %v, want a conflict", err)
	}
	if c := replicas[1].Classify(err); !c.Retryable || c.Code != "claim_conflict" {
		t.Errorf("Classify = %+v, want a retryable claim_conflict", c)
	}
	now, err := leases.Get(t.Context(), "host-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Labels[providers.LabelMachine] != "metal-2" || now.Annotations[AnnotationPhase] != phaseReady {
		t.Errorf("claim after the stale update: machine %q phase %q, want metal-2 ready", now.Labels[providers.LabelMachine], now.Annotations[AnnotationPhase])
	}
}
