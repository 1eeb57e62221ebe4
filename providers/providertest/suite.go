// Package providertest is the conformance suite every provider passes:
// the contract of providers.Provider checked through its methods only.
package providertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/providers"
)

// Setup describes the provider under test.
type Setup struct {
	// New returns a fresh provider over an empty cloud.
	New func(t *testing.T) providers.Provider
	// Cluster is the cluster name the provider was built with.
	Cluster string
	// MachineType and Location are valid for Create.
	MachineType string
	Location    string
}

// Run runs the suite.
func Run(t *testing.T, s Setup) {
	t.Run("CreateIsIdempotentAndListed", func(t *testing.T) {
		t.Parallel()
		p := s.New(t)
		ctx := context.Background()
		req := s.request("conf-a1")
		first, err := p.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if id, known := p.ProviderID(req); known && id != first.ProviderID {
			t.Fatalf("ProviderID promised %q, Create returned %q", id, first.ProviderID)
		}
		again, err := p.Create(ctx, req)
		if err != nil {
			t.Fatalf("retried Create: %v", err)
		}
		if again.ProviderID != first.ProviderID {
			t.Fatalf("retried Create made a second machine: %q then %q", first.ProviderID, again.ProviderID)
		}
		listed, err := p.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, in := range listed {
			if in.ProviderID == first.ProviderID {
				n++
				if in.Group != req.Group {
					t.Errorf("listed group %q, want %q", in.Group, req.Group)
				}
				if in.State != providers.StateCreating && in.State != providers.StateRunning {
					t.Errorf("listed state %v", in.State)
				}
			}
		}
		if n != 1 {
			t.Fatalf("List shows the machine %d times, want once", n)
		}
	})
	t.Run("DeleteIsIdempotent", func(t *testing.T) {
		t.Parallel()
		p := s.New(t)
		ctx := context.Background()
		in, err := p.Create(ctx, s.request("conf-d1"))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(ctx, in.ProviderID); err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(ctx, in.ProviderID); err != nil {
			t.Fatalf("deleting a deleted machine: %v", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			listed, err := p.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			gone := true
			for _, l := range listed {
				if l.ProviderID == in.ProviderID && l.State != providers.StateDeleting {
					gone = false
				}
			}
			if gone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("machine still listed as live after Delete")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("UnknownMachineTypeIsNotFound", func(t *testing.T) {
		t.Parallel()
		p := s.New(t)
		if _, err := p.MachineType(context.Background(), "no-such-type", s.Location); !errors.Is(err, providers.ErrNotFound) {
			t.Fatalf("err = %v, want providers.ErrNotFound", err)
		}
		mt, err := p.MachineType(context.Background(), s.MachineType, s.Location)
		if err != nil {
			t.Fatal(err)
		}
		if mt.MilliCPU <= 0 || mt.MemoryBytes <= 0 {
			t.Fatalf("machine type %+v has no CPU or memory", mt)
		}
	})
	t.Run("ClassifyGivesAClass", func(t *testing.T) {
		t.Parallel()
		p := s.New(t)
		c := p.Classify(errors.New("something broke"))
		if c.Class != providers.ErrorOther && c.Class != providers.ErrorOutOfResources {
			t.Fatalf("Classify returned class %d", c.Class)
		}
	})
}

func (s Setup) request(name string) providers.CreateRequest {
	return providers.CreateRequest{
		Name: name, Cluster: s.Cluster, Group: "conformance", MachineType: s.MachineType, Location: s.Location,
		ImageKind:  providers.ImageRuntimeInstall,
		NodeLabels: map[string]string{providers.LabelCluster: s.Cluster, providers.LabelGroup: "conformance"},
	}
}
