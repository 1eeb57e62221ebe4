package static

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh/knownhosts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/providertest"
	"github.com/prebake-dev/prebake/providers/static/providerid"
	"github.com/prebake-dev/prebake/providers/static/statictest"
)

// poolMachines returns the pool's machines as provider machines.
func poolMachines(sp *statictest.Pool) []Machine {
	var ms []Machine
	for _, m := range sp.Machines {
		ms = append(ms, Machine{Host: m.Host, Address: m.Address, Port: m.Port, User: "root", MachineType: testType, Zone: testZone})
	}
	return ms
}

// poolShell returns an SSH shell over the pool with known_hosts file kh.
func poolShell(t *testing.T, sp *statictest.Pool, kh string, commandTimeout time.Duration) *SSHShell {
	t.Helper()
	s, err := NewSSHShell(SSHOptions{PrivateKey: sp.ClientKey, KnownHostsFile: kh, ConnectTimeout: 10 * time.Second, CommandTimeout: commandTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSystemSSHPool drives the provider against three real sshd machines:
// concurrent claims land on distinct machines and run the node script there,
// the pool runs dry with OutOfResources, a retry is idempotent, and Delete
// resets a machine and hands it out again.
func TestSystemSSHPool(t *testing.T) {
	t.Parallel()
	sp := statictest.NewPool(t, 3)
	client := fake.NewClientset()
	p := newTestProvider(t, client, poolShell(t, sp, sp.KnownHosts, time.Minute), poolMachines(sp), func(o *Options) {
		o.ResetCommand = string(sp.MarkerScript("reset"))
	})
	ctx := t.Context()
	req := func(name string) providers.CreateRequest {
		r := request(name, "metal")
		r.UserData = sp.MarkerScript("bootstrap")
		return r
	}

	// Three concurrent scale-ups take the three machines.
	got := make([]providers.Instance, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, name := range []string{"metal-a", "metal-b", "metal-c"} {
		wg.Go(func() { got[i], errs[i] = p.Create(ctx, req(name)) })
	}
	wg.Wait()
	hostOf := map[string]string{} // machine name → host
	for i, in := range got {
		if errs[i] != nil {
			t.Fatalf("Create #%d: %v", i, errs[i])
		}
		host, err := providerid.Parse(in.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != providers.StateRunning {
			t.Errorf("%s: state %v after its bootstrap, want running", in.Name, in.State)
		}
		hostOf[in.Name] = host
	}
	hosts := slices.Sorted(func(yield func(string) bool) {
		for _, h := range hostOf {
			if !yield(h) {
				return
			}
		}
	})
	if diff := cmp.Diff([]string{"m1", "m2", "m3"}, hosts); diff != "" {
		t.Fatalf("hosts claimed (-want +got):\n%s", diff)
	}
	for _, h := range hosts {
		if diff := cmp.Diff([]string{h}, sp.Markers(t, h, "bootstrap")); diff != "" {
			t.Errorf("bootstrap markers of %s (-want +got):\n%s", h, diff)
		}
	}

	// The pool is dry.
	_, err := p.Create(ctx, req("metal-d"))
	if c := p.Classify(err); c.Class != providers.ErrorOutOfResources {
		t.Fatalf("Create on a dry pool: %v classified %+v, want OutOfResources", err, c)
	}

	// A retry is the same machine, bootstrapped once.
	again, err := p.Create(ctx, req("metal-a"))
	if err != nil {
		t.Fatal(err)
	}
	if again.ProviderID != providerid.Format(hostOf["metal-a"]) {
		t.Errorf("retried Create returned %s, want %s", again.ProviderID, providerid.Format(hostOf["metal-a"]))
	}
	if n := len(sp.Markers(t, hostOf["metal-a"], "bootstrap")); n != 1 {
		t.Errorf("the retried machine ran its bootstrap %d times, want 1", n)
	}

	// Delete resets the machine and frees it for the next scale-up.
	freed := hostOf["metal-b"]
	if err := p.Delete(ctx, providerid.Format(freed)); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if diff := cmp.Diff([]string{freed}, sp.Markers(t, freed, "reset")); diff != "" {
		t.Errorf("reset markers of %s (-want +got):\n%s", freed, diff)
	}
	if _, err := client.CoordinationV1().Leases(DefaultNamespace).Get(ctx, freed, metav1.GetOptions{}); err == nil {
		t.Errorf("claim of %s still exists after Delete", freed)
	}
	if err := p.Delete(ctx, providerid.Format(freed)); err != nil {
		t.Errorf("Delete of a free machine: %v", err)
	}
	if n := len(sp.Markers(t, freed, "reset")); n != 1 {
		t.Errorf("a second Delete reset the free machine again (%d resets)", n)
	}
	next, err := p.Create(ctx, req("metal-e"))
	if err != nil {
		t.Fatalf("Create after a Delete: %v", err)
	}
	if next.ProviderID != providerid.Format(freed) {
		t.Errorf("Create after a Delete got %s, want the freed %s", next.ProviderID, providerid.Format(freed))
	}
	if n := len(sp.Markers(t, freed, "bootstrap")); n != 2 {
		t.Errorf("the reused machine has %d bootstrap markers, want 2", n)
	}
}

// TestSystemHostKeyChecked: a machine whose host key is not the one in
// known_hosts, or that known_hosts lacks, is refused before anything runs,
// with an error that says so, and its claim is released.
func TestSystemHostKeyChecked(t *testing.T) {
	t.Parallel()
	sp := statictest.NewPool(t, 1)
	m := poolMachines(sp)[0]
	addr := addrOf(m)
	wrongKey, _ := statictest.NewKey(t)
	tests := []struct {
		name    string
		known   string
		wantErr []string
	}{
		{name: "mismatch", known: knownhosts.Line([]string{addr}, wrongKey) + "\n", wantErr: []string{"does not match", "refusing to connect", `"m1"`}},
		{name: "unknown host", known: knownhosts.Line([]string{"[192.0.2.9]:22"}, sp.Machines[0].HostKey) + "\n", wantErr: []string{"is not in", "refusing to connect"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kh := filepath.Join(t.TempDir(), "known_hosts")
			statictest.WriteFile(t, kh, []byte(tc.known), 0o600)
			client := fake.NewClientset()
			p := newTestProvider(t, client, poolShell(t, sp, kh, time.Minute), poolMachines(sp), nil)
			r := request("metal-"+strings.ReplaceAll(tc.name, " ", "-"), "metal")
			r.UserData = sp.MarkerScript("bootstrap-" + strings.ReplaceAll(tc.name, " ", "-"))
			_, err := p.Create(t.Context(), r)
			var hk *HostKeyError
			if !errors.As(err, &hk) {
				t.Fatalf("Create: %v, want a *HostKeyError", err)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if c := p.Classify(err); c.Retryable || c.Code != "ssh_host_key" {
				t.Errorf("Classify = %+v, want ssh_host_key, not retryable", c)
			}
			if got := sp.Markers(t, m.Host, "bootstrap-"+strings.ReplaceAll(tc.name, " ", "-")); got != nil {
				t.Errorf("the script ran on a machine with the wrong key: %v", got)
			}
			l, err := client.CoordinationV1().Leases(DefaultNamespace).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Items) != 0 {
				t.Errorf("%d claims left after a refused bootstrap, want 0", len(l.Items))
			}
		})
	}
}

// TestSystemCommandTimeout: a script that outlives the command timeout is
// cut off, and the error says so and is retryable.
func TestSystemCommandTimeout(t *testing.T) {
	t.Parallel()
	sp := statictest.NewPool(t, 1)
	sh := poolShell(t, sp, sp.KnownHosts, 500*time.Millisecond)
	began := time.Now()
	err := sh.Run(context.Background(), poolMachines(sp)[0], []byte("sleep 60\n"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want a deadline error", err)
	}
	if !strings.Contains(err.Error(), "did not finish within 500ms") {
		t.Errorf("error %q doesn't name the timeout", err)
	}
	if took := time.Since(began); took > 30*time.Second {
		t.Errorf("Run returned after %s; the timeout did not stop it", took)
	}
	p := newTestProvider(t, fake.NewClientset(), sh, poolMachines(sp), nil)
	if c := p.Classify(err); !c.Retryable || c.Code != "timeout" {
		t.Errorf("Classify = %+v, want a retryable timeout", c)
	}
}

// TestSystemCommandFails: a failing script reports its exit status and the
// tail of its stderr.
func TestSystemCommandFails(t *testing.T) {
	t.Parallel()
	sp := statictest.NewPool(t, 1)
	sh := poolShell(t, sp, sp.KnownHosts, time.Minute)
	err := sh.Run(t.Context(), poolMachines(sp)[0], []byte("echo apt is locked >&2\nexit 7\n"))
	var ce *CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("Run: %v, want a *CommandError", err)
	}
	if diff := cmp.Diff(&CommandError{Host: "m1", Status: 7, Stderr: "apt is locked"}, ce); diff != "" {
		t.Errorf("CommandError (-want +got):\n%s", diff)
	}
}

// TestConformanceSystem runs the conformance suite over real sshd machines
// and a real API server: each fresh "cloud" is a new claim namespace over
// the same machines. The suite's node script is "#cloud-config", a comment
// to sh, so it succeeds everywhere.
func TestConformanceSystem(t *testing.T) {
	t.Parallel()
	sp := statictest.NewPool(t, 12) // the suite's parallel case makes 8, the restart case 3
	kc := statictest.StartCluster(t)
	shell := poolShell(t, sp, sp.KnownHosts, time.Minute)
	var namespaces atomic.Int64
	newNamespace := func() string { return fmt.Sprintf("conformance-%d", namespaces.Add(1)) }
	var clouds sync.Map // providers.Provider → its namespace
	build := func(t *testing.T, ns string, sh Shell, machines []Machine) providers.Provider {
		t.Helper()
		client, err := kubernetes.NewForConfig(kc.Config) // a connection of its own, as a restarted plugin has
		if err != nil {
			t.Fatal(err)
		}
		p := newTestProvider(t, client, sh, machines, func(o *Options) { o.Cluster, o.Namespace, o.Now, o.ResetCommand = "c", ns, nil, "true" })
		clouds.Store(providers.Provider(p), ns)
		return p
	}
	wrongKeys := filepath.Join(t.TempDir(), "known_hosts")
	var lines strings.Builder
	for _, m := range poolMachines(sp) {
		k, _ := statictest.NewKey(t)
		lines.WriteString(knownhosts.Line([]string{addrOf(m)}, k) + "\n")
	}
	statictest.WriteFile(t, wrongKeys, []byte(lines.String()), 0o600)
	providertest.Run(t, providertest.Setup[*testing.T]{
		New: func(t *testing.T) providers.Provider {
			return build(t, newNamespace(), shell, poolMachines(sp))
		},
		Reopen: func(t *testing.T, p providers.Provider) providers.Provider {
			ns, ok := clouds.Load(p)
			if !ok {
				t.Fatal("Reopen of a provider this test did not build")
			}
			return build(t, ns.(string), shell, poolMachines(sp))
		},
		CreateErrors: []providertest.CreateErrorCase[*testing.T]{
			{
				Name: "pool has no machine of the type",
				New: func(t *testing.T) providers.Provider {
					ms := poolMachines(sp)[:2]
					for i := range ms {
						ms[i].MachineType = "metal-large"
					}
					return build(t, newNamespace(), shell, ms)
				},
				Class: providers.ErrorOutOfResources,
			},
			{
				Name: "nothing listens on the SSH port",
				New: func(t *testing.T) providers.Provider {
					ms := poolMachines(sp)[:1]
					ms[0].Port = 1
					return build(t, newNamespace(), shell, ms)
				},
				Class: providers.ErrorOther, Retryable: true,
			},
			{
				Name: "host key mismatch",
				New: func(t *testing.T) providers.Provider {
					return build(t, newNamespace(), poolShell(t, sp, wrongKeys, time.Minute), poolMachines(sp))
				},
				Class: providers.ErrorOther,
			},
		},
		Cluster:     "c",
		MachineType: testType,
		Location:    testZone,
	})
}

// BenchmarkSSHShellRun measures one script run on a real sshd: TCP connect,
// handshake with the host key check, public-key login, `sh -s` with a
// one-line script, exit status. It is the fixed cost the static provider
// adds to every bootstrap and reset.
func BenchmarkSSHShellRun(b *testing.B) {
	sp := statictest.NewPool(b, 1)
	s, err := NewSSHShell(SSHOptions{PrivateKey: sp.ClientKey, KnownHostsFile: sp.KnownHosts})
	if err != nil {
		b.Fatal(err)
	}
	m := Machine{Host: sp.Machines[0].Host, Address: sp.Machines[0].Address, Port: sp.Machines[0].Port, User: "root"}
	for b.Loop() {
		if err := s.Run(context.Background(), m, []byte("true\n")); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSystemScriptEnvironment: a script learns its machine's providerID,
// host and labels from its environment, and runs as root.
func TestSystemScriptEnvironment(t *testing.T) {
	t.Parallel()
	sp := statictest.NewPool(t, 1)
	m := poolMachines(sp)[0]
	m.Labels = map[string]string{"rack": "r1", "example.com/disk": "nvme"}
	err := poolShell(t, sp, sp.KnownHosts, time.Minute).Run(t.Context(), m, []byte(`
[ "$PREBAKE_PROVIDER_ID" = static://m1 ] || { echo "providerID $PREBAKE_PROVIDER_ID" >&2; exit 1; }
[ "$PREBAKE_HOST" = m1 ] || { echo "host $PREBAKE_HOST" >&2; exit 1; }
[ "$PREBAKE_NODE_LABELS" = example.com/disk=nvme,rack=r1 ] || { echo "labels $PREBAKE_NODE_LABELS" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "uid $(id -u)" >&2; exit 1; }
`))
	if err != nil {
		t.Fatal(err)
	}
}
