package static

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/providers"
)

const (
	testCluster = "test"
	testType    = "metal-small"
	testZone    = "zone-a"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// fakeShell plays the machines: it records every script each host ran and
// fails the hosts it is told to.
type fakeShell struct {
	mu   sync.Mutex // guards the fields below
	runs map[string][]string
	fail map[string]error // host → error of its next runs
}

func newFakeShell() *fakeShell {
	return &fakeShell{runs: map[string][]string{}, fail: map[string]error{}}
}

func (f *fakeShell) Run(ctx context.Context, m Machine, script []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail[m.Host]; err != nil {
		return err
	}
	f.runs[m.Host] = append(f.runs[m.Host], string(script))
	return nil
}

func (f *fakeShell) failHost(host string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[host] = err
}

// scripts returns what host ran, in order.
func (f *fakeShell) scripts(host string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.runs[host]...)
}

// pool returns n machines host-0 … host-<n-1> of testType in testZone.
func pool(n int) []Machine {
	ms := make([]Machine, n)
	for i := range ms {
		ms[i] = Machine{Host: fmt.Sprintf("host-%d", i), Address: "192.0.2.1", MachineType: testType, Zone: testZone}
	}
	return ms
}

func testTypes() []providers.MachineType {
	return []providers.MachineType{
		{Name: testType, MilliCPU: 4000, MemoryBytes: 8 << 30, Arch: "amd64"},
		{Name: "metal-large", MilliCPU: 32000, MemoryBytes: 128 << 30, Arch: "arm64"},
	}
}

func newTestProvider(t *testing.T, client kubernetes.Interface, sh Shell, machines []Machine, mod func(*Options)) *Provider {
	t.Helper()
	o := Options{
		Client:       client,
		Cluster:      testCluster,
		Machines:     machines,
		MachineTypes: testTypes(),
		Shell:        sh,
		ResetCommand: "reset-the-machine",
		DrainTimeout: 5 * time.Second,
		Now:          func() time.Time { return t0 },
		Logger:       slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	if mod != nil {
		mod(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func request(name, group string) providers.CreateRequest {
	return providers.CreateRequest{
		Name: name, Cluster: testCluster, Group: group, MachineType: testType, Location: testZone,
		ImageKind: providers.ImageRuntimeInstall,
		UserData:  []byte("#!/bin/sh\necho bootstrap " + name + "\n"),
	}
}
