// Package providertest is the conformance suite every provider passes:
// the contract of providers.Provider checked through its methods only.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/prebake-dev/prebake/internal/tb"
	"github.com/prebake-dev/prebake/providers"
)

// Setup describes the provider under test. T is the test type, T
// in practice (the package imports no testing).
type Setup[T tb.T[T]] struct {
	// New returns a fresh provider over an empty cloud.
	New func(t T) providers.Provider
	// Cluster is the cluster name the provider was built with.
	Cluster string
	// MachineType and Location are valid for Create.
	MachineType string
	Location    string
	// Reopen returns a second provider over the same cloud as p, built the
	// way a restarted plugin builds one: it must share no memory with p, so
	// whatever it knows comes from the cloud. nil skips the restart case
	// (only for providers whose cloud is their memory, like fake).
	Reopen func(t T, p providers.Provider) providers.Provider
	// CreateErrors are creation failures the provider can be made to hit,
	// each with the verdict Classify must give.
	CreateErrors []CreateErrorCase[T]
	// Parallel is how many Creates run at once in the concurrency case;
	// default 8.
	Parallel int
	// ResumeUserData is the user-data the standby case resumes with;
	// default a bare "#cloud-config\n". A provider that runs the node script
	// in it itself (hcloud, over SSH) needs one bootstrap renders.
	ResumeUserData []byte
}

// CreateErrorCase is one injected creation failure.
type CreateErrorCase[T tb.T[T]] struct {
	Name string
	// New returns a provider whose next Create of a Setup.MachineType in
	// Setup.Location fails with this error.
	New       func(t T) providers.Provider
	Class     providers.ErrorClass
	Retryable bool
}

// Run runs the suite.
func Run[T tb.T[T]](t T, s Setup[T]) {
	t.Run("CreateIsIdempotentAndListed", func(t T) {
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
	t.Run("DeleteIsIdempotent", func(t T) {
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
	// CA's price expander skips a group without a price; the core tells
	// the user what the provider declares will give it one.
	t.Run("DeclaresWherePricesComeFrom", func(t T) {
		t.Parallel()
		if fix := s.New(t).Capabilities().PriceFix; fix == "" {
			t.Fatal("Capabilities().PriceFix is empty: declare what gives a machine type without a price one")
		}
	})
	t.Run("UnknownMachineTypeIsNotFound", func(t T) {
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
	t.Run("ListAfterRestartRebuildsOwnership", func(t T) {
		if s.Reopen == nil {
			t.Skip("Setup.Reopen is nil")
		}
		t.Parallel()
		runRestart(t, s)
	})
	t.Run("ParallelCreatesGiveDistinctInstances", func(t T) {
		t.Parallel()
		runParallel(t, s)
	})
	t.Run("MachineTypeFeedsTemplate", func(t T) {
		t.Parallel()
		runTemplate(t, s)
	})
	for _, c := range s.CreateErrors {
		t.Run("CreateErrorIsClassified/"+c.Name, func(t T) {
			t.Parallel()
			runCreateError(t, s, c)
		})
	}
	t.Run("StandbyParkAndResume", func(t T) {
		t.Parallel()
		runStandby(t, s)
	})
	t.Run("ClassifyGivesAClass", func(t T) {
		t.Parallel()
		p := s.New(t)
		c := p.Classify(errors.New("something broke"))
		if c.Class != providers.ErrorOther && c.Class != providers.ErrorOutOfResources {
			t.Fatalf("Classify returned class %d", c.Class)
		}
	})
}

func (s Setup[T]) request(name string) providers.CreateRequest {
	return s.requestIn(name, "conformance")
}

func (s Setup[T]) requestIn(name, group string) providers.CreateRequest {
	return providers.CreateRequest{
		Name: name, Cluster: s.Cluster, Group: group, MachineType: s.MachineType, Location: s.Location,
		ImageKind:  providers.ImageRuntimeInstall,
		NodeLabels: map[string]string{providers.LabelCluster: s.Cluster, providers.LabelGroup: group},
		UserData:   []byte("#cloud-config\n"),
	}
}

// listed returns the instances of List by providerID, failing on duplicates.
func listed(t tb.TB, p providers.Provider) map[string]providers.Instance {
	t.Helper()
	ins, err := p.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]providers.Instance, len(ins))
	for _, in := range ins {
		if _, dup := m[in.ProviderID]; dup {
			t.Fatalf("List shows %q twice", in.ProviderID)
		}
		m[in.ProviderID] = in
	}
	return m
}

func runRestart[T tb.T[T]](t T, s Setup[T]) {
	p := s.New(t)
	ctx := context.Background()
	want := map[string]string{} // providerID → group
	for i, g := range []string{"group-a", "group-b", "group-b"} {
		in, err := p.Create(ctx, s.requestIn(fmt.Sprintf("conf-r%d", i), g))
		if err != nil {
			t.Fatal(err)
		}
		want[in.ProviderID] = g
	}
	q := s.Reopen(t, p)
	got := listed(t, q)
	for id, g := range want {
		in, ok := got[id]
		if !ok {
			t.Fatalf("after a restart, List lost %q (has %v)", id, got)
		}
		if in.Group != g {
			t.Errorf("after a restart, %q is in group %q, want %q", id, in.Group, g)
		}
	}
	if len(got) != len(want) {
		t.Errorf("after a restart, List shows %d instances, want %d", len(got), len(want))
	}
	// Idempotence survives the restart: the same name is the same machine.
	again, err := q.Create(ctx, s.requestIn("conf-r0", "group-a"))
	if err != nil {
		t.Fatal(err)
	}
	if want[again.ProviderID] != "group-a" {
		t.Fatalf("Create after a restart made a second machine %q", again.ProviderID)
	}
	for id := range want {
		if err := q.Delete(ctx, id); err != nil {
			t.Fatalf("deleting %q after a restart: %v", id, err)
		}
	}
}

func runParallel[T tb.T[T]](t T, s Setup[T]) {
	p := s.New(t)
	n := s.Parallel
	if n <= 0 {
		n = 8
	}
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in, err := p.Create(context.Background(), s.request(fmt.Sprintf("conf-p%d", i)))
			ids[i], errs[i] = in.ProviderID, err
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		if id == "" || seen[id] {
			t.Fatalf("create %d returned providerID %q, empty or already returned", i, id)
		}
		seen[id] = true
	}
	got := listed(t, p)
	for id := range seen {
		if _, ok := got[id]; !ok {
			t.Errorf("List lacks %q", id)
		}
	}
	if len(got) != n {
		t.Errorf("List shows %d instances after %d creates", len(got), n)
	}
}

func runTemplate[T tb.T[T]](t T, s Setup[T]) {
	p := s.New(t)
	mt, err := p.MachineType(context.Background(), s.MachineType, s.Location)
	if err != nil {
		t.Fatal(err)
	}
	node := providers.BuildNode(providers.NodeShape{
		Name: "template", Cluster: s.Cluster, Group: "conformance", MachineType: mt, Zone: s.Location,
	})
	if got := node.Status.Capacity[corev1.ResourceCPU]; got.MilliValue() != mt.MilliCPU || mt.MilliCPU <= 0 {
		t.Errorf("template cpu %v, machine type %d millicores", got.String(), mt.MilliCPU)
	}
	if got := node.Status.Capacity[corev1.ResourceMemory]; got.Value() != mt.MemoryBytes || mt.MemoryBytes <= 0 {
		t.Errorf("template memory %v, machine type %d bytes", got.String(), mt.MemoryBytes)
	}
	if mt.Name != s.MachineType {
		t.Errorf("MachineType(%q).Name = %q", s.MachineType, mt.Name)
	}
	if mt.Arch != "amd64" && mt.Arch != "arm64" {
		t.Errorf("arch %q is not a Kubernetes arch", mt.Arch)
	}
	for k, want := range map[string]string{
		providers.LabelInstanceType: s.MachineType,
		providers.LabelArch:         mt.Arch,
		providers.LabelGroup:        "conformance",
	} {
		if got := node.Labels[k]; got != want {
			t.Errorf("template label %s=%q, want %q", k, got, want)
		}
	}
}

func runCreateError[T tb.T[T]](t T, s Setup[T], c CreateErrorCase[T]) {
	p := c.New(t)
	_, err := p.Create(context.Background(), s.request("conf-e1"))
	if err == nil {
		t.Fatal("Create succeeded; the case must make it fail")
	}
	got := p.Classify(err)
	if got.Class != c.Class || got.Retryable != c.Retryable || got.Code == "" {
		t.Fatalf("Classify(%v) = %+v, want class %d, retryable %v and a code", err, got, c.Class, c.Retryable)
	}
}

// runStandby checks Park and Resume: unsupported where the provider
// declares no standby state; otherwise, for each state it declares, a
// standby is listed as one, parks, is listed parked by a restarted
// provider (Setup.Reopen), and once that one resumes it is listed as a
// machine that joins, with the marker gone before the machine runs again.
func runStandby[T tb.T[T]](t T, s Setup[T]) {
	p := s.New(t)
	ctx := context.Background()
	caps := p.Capabilities()
	if len(caps.Standby) == 0 {
		if err := p.Park(ctx, "x://none", providers.StandbyStopped); !errors.Is(err, providers.ErrStandbyUnsupported) {
			t.Errorf("Park of a provider without standby states = %v, want ErrStandbyUnsupported", err)
		}
		if _, err := p.Resume(ctx, "x://none", nil); !errors.Is(err, providers.ErrStandbyUnsupported) {
			t.Errorf("Resume of a provider without standby states = %v, want ErrStandbyUnsupported", err)
		}
		return
	}
	for _, st := range caps.Standby {
		if !slices.Contains(providers.StandbyStates, st) {
			t.Fatalf("Capabilities.Standby declares %q, which is no providers.StandbyState", st)
		}
	}
	for _, state := range caps.Standby {
		t.Run(string(state), func(t T) { runStandbyState(t, s, state) })
	}
}

func runStandbyState[T tb.T[T]](t T, s Setup[T], state providers.StandbyState) {
	p := s.New(t)
	ctx := context.Background()
	req := s.request("conf-s-" + string(state))
	req.Standby = state
	in, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if in.Standby.State != state || in.Standby.Phase == providers.StandbyNone {
		t.Errorf("Create of a standby returned standby %+v, want state %q in a standby phase", in.Standby, state)
	}
	waitListed(t, p, in.ProviderID, "a warming or prepared standby", func(l providers.Instance) bool {
		return l.Standby.State == state && (l.Standby.Phase == providers.StandbyWarming || l.Standby.Phase == providers.StandbyPrepared)
	})
	if err := p.Park(ctx, in.ProviderID, state); err != nil {
		t.Fatalf("Park: %v", err)
	}
	if err := p.Park(ctx, in.ProviderID, state); err != nil {
		t.Fatalf("Park of a parked standby: %v", err)
	}
	parked := func(l providers.Instance) bool {
		return l.Standby == providers.Standby{State: state, Phase: providers.StandbyParked} && l.Error == nil
	}
	waitListed(t, p, in.ProviderID, "a parked standby", parked)
	if s.Reopen != nil {
		// What the standby is, is in the cloud: a restarted plugin sees it
		// parked and takes it.
		p = s.Reopen(t, p)
		waitListed(t, p, in.ProviderID, "a parked standby after a restart", parked)
	}
	ud := s.ResumeUserData
	if ud == nil {
		ud = []byte("#cloud-config\n")
	}
	got, err := p.Resume(ctx, in.ProviderID, ud)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if got.ProviderID != in.ProviderID || got.Standby.Phase != providers.StandbyNone {
		t.Errorf("Resume returned %q standby %+v, want %q and no standby", got.ProviderID, got.Standby, in.ProviderID)
	}
	if _, err := p.Resume(ctx, in.ProviderID, ud); err != nil {
		t.Errorf("Resume of a resumed machine: %v", err)
	}
	waitListed(t, p, in.ProviderID, "a machine that joins, up again", func(l providers.Instance) bool {
		return l.Standby.Phase == providers.StandbyNone && l.Error == nil &&
			(l.State == providers.StateCreating || l.State == providers.StateRunning)
	})
	if err := p.Delete(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
}

// waitListed waits up to 30s until List shows id as ok says.
func waitListed(t tb.TB, p providers.Provider, id, what string, ok func(providers.Instance) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, found := listed(t, p)[id]
		if found && ok(l) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("List never showed %s as %s; last: %+v (found %v)", id, what, l, found)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
