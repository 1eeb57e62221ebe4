package autoscaling

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// A reservation goes the scale-up way: it counts toward its group, its
// machine is made by the workers (the request carries the extra taint and
// the image), and Release deletes it through them.
func TestReservationRunsThroughTheWorkers(t *testing.T) {
	t.Parallel()
	p := fake.New()
	c := newCore(t, p, GroupSpec{ID: "g1", Provider: "fake", MaxSize: 2, MachineType: "m1", Zone: "z1"})
	taint := providers.Taint{Key: providers.TaintCanary, Value: "g1", Effect: "NoSchedule"}
	r, err := c.Reserve("g1", "img-1", taint)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustTarget(t, c, "g1"); got != 1 {
		t.Errorf("target with a reservation = %d, want 1", got)
	}
	if err := r.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := nthRequest(t, p, 1)
	if req.Image != "img-1" || len(req.NodeTaints) != 1 || req.NodeTaints[0] != taint {
		t.Errorf("request image %q taints %v, want img-1 and the reservation's taint", req.Image, req.NodeTaints)
	}
	if m := r.Machine(); m.ProviderID != "fake://"+req.Name || m.Gone {
		t.Errorf("machine view %+v", m)
	}
	r2, err := c.Reserve("g1", "img-1")
	if err != nil {
		t.Fatalf("a second reservation with room: %v", err)
	}
	if _, err := c.Reserve("g1", "img-1"); !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("a reservation past maxSize = %v, want FailedPrecondition", err)
	}
	// Never created: released without a cloud call.
	if _, err := r2.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := p.Calls("Delete"); n != 1 || len(p.Machines()) != 0 {
		t.Errorf("after Release: %d deletes, machines %v", n, p.Machines())
	}
	if !r.Machine().Gone {
		t.Error("the released machine is not gone")
	}
}

// Shutdown during a canary waits for it: the reservation's machine is
// created and deleted by the workers before Shutdown returns.
func TestShutdownWaitsForAReservation(t *testing.T) {
	t.Parallel()
	p := fake.New()
	release := p.GateCreates()
	// maxSize 1: while the reservation holds the group, IncreaseSize says
	// FailedPrecondition until Shutdown begins, then Unavailable, and never
	// creates anything.
	c := newCore(t, p, GroupSpec{ID: "g1", Provider: "fake", MaxSize: 1, MachineType: "m1", Zone: "z1"})
	r, err := c.Reserve("g1", "img-1")
	if err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() { created <- r.Create(context.Background()) }()
	eventually(t, "the create in flight", func() bool { return p.Calls("Create") == 1 })

	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutdown <- c.Shutdown(ctx)
	}()
	eventually(t, "shutdown refusing scale-ups", func() bool { return errors.Is(c.IncreaseSize("g1", 1), ErrUnavailable) })
	release()
	if err := <-created; err != nil {
		t.Fatalf("Create during Shutdown: %v", err)
	}
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned (%v) while a reservation was held", err)
	default:
	}
	// The workers still run: Release's delete goes through them.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.Release(ctx); err != nil {
		t.Fatalf("Release during Shutdown: %v", err)
	}
	if err := <-shutdown; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := p.Calls("Delete"); n != 1 || len(p.Machines()) != 0 {
		t.Errorf("after Shutdown: %d deletes, machines %v; want the reserved machine deleted", n, p.Machines())
	}
}
