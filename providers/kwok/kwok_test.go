package kwok

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/providers"
)

const (
	testCluster  = "test"
	testGPULabel = "prebake.dev/gpu"
)

var leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

// newTestProvider returns a Provider over cs with a fast retry and a logger
// that writes to the test's output.
func newTestProvider(t *testing.T, cs *fake.Clientset, mod func(*Options)) *Provider {
	t.Helper()
	o := Options{
		Client:   cs,
		Cluster:  testCluster,
		Boot:     BootProfile{Prebaked: 10 * time.Millisecond, RuntimeInstall: time.Hour},
		Reserved: providers.Reserved{MilliCPU: 100, MemoryBytes: 256 << 20},
		GPULabel: testGPULabel,
		Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p.retryBase, p.retryMax = time.Millisecond, 20*time.Millisecond
	return p
}

// startRun runs p.Run until the returned stop is called or the test ends;
// stop waits for Run to return and checks its result.
func startRun(t *testing.T, p *Provider) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run returned %v, want nil after its context ended", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // poll interval, not synchronisation
	}
}

func nodeExists(cs *fake.Clientset, name string) func() (bool, error) {
	return func() (bool, error) {
		_, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
}

// request returns a CreateRequest the way the core builds one: NodeLabels
// already hold the standard labels.
func request(name, group, machineType, zone string, kind providers.ImageKind) providers.CreateRequest {
	return providers.CreateRequest{
		Name:        name,
		Cluster:     testCluster,
		Group:       group,
		MachineType: machineType,
		Location:    zone,
		ImageKind:   kind,
		NodeLabels: map[string]string{
			providers.LabelZone:         zone,
			providers.LabelInstanceType: machineType,
			providers.LabelGroup:        group,
			providers.LabelCluster:      testCluster,
			"team":                      "a",
		},
		UserData: []byte("#cloud-config\nsecret: do-not-log\n"),
	}
}

// quantities renders a ResourceList for cmp: Quantity has unexported fields.
func quantities(rl corev1.ResourceList) map[string]string {
	out := make(map[string]string, len(rl))
	for k, v := range rl {
		out[string(k)] = v.String()
	}
	return out
}

func listInstances(t *testing.T, p *Provider) []providers.Instance {
	t.Helper()
	got, err := p.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return got
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	p := newTestProvider(t, cs, nil)
	ctx := t.Context()

	req := request("pool-a-1", "pool-a", "kwok-gpu", "zone-a", providers.ImagePrebaked)
	req.NodeLabels[providers.LabelRegion] = "region-1"
	req.NodeTaints = []providers.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}}

	before := time.Now()
	inst, err := p.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if inst.CreatedAt.Before(before.Add(-time.Millisecond)) || inst.CreatedAt.After(time.Now()) {
		t.Errorf("Create: CreatedAt = %v, want between %v and now", inst.CreatedAt, before)
	}
	want := providers.Instance{
		ProviderID: "kwok://pool-a-1",
		Name:       "pool-a-1",
		Group:      "pool-a",
		State:      providers.StateCreating,
		ImageKind:  providers.ImagePrebaked,
		CreatedAt:  inst.CreatedAt,
	}
	if diff := cmp.Diff(want, inst); diff != "" {
		t.Errorf("Create (-want +got):\n%s", diff)
	}
	if id, known := p.ProviderID(req); id != want.ProviderID || !known {
		t.Errorf("ProviderID = %q, %v; want %q, true", id, known, want.ProviderID)
	}

	// Before Run, the machine is booting: a record, no Node.
	if diff := cmp.Diff([]providers.Instance{want}, listInstances(t, p)); diff != "" {
		t.Errorf("List while booting (-want +got):\n%s", diff)
	}
	lease, err := cs.CoordinationV1().Leases(DefaultNamespace).Get(ctx, "pool-a-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	wantLeaseLabels := map[string]string{
		providers.LabelCluster:   testCluster,
		providers.LabelGroup:     "pool-a",
		providers.LabelImageKind: "prebaked",
		providers.LabelMachine:   "pool-a-1",
	}
	if diff := cmp.Diff(wantLeaseLabels, lease.Labels); diff != "" {
		t.Errorf("lease labels (-want +got):\n%s", diff)
	}
	for k, v := range lease.Annotations {
		if strings.Contains(v, "do-not-log") {
			t.Errorf("lease annotation %s holds user-data", k)
		}
	}

	startRun(t, p)
	waitFor(t, "node pool-a-1", nodeExists(cs, "pool-a-1"))
	node, err := cs.CoreV1().Nodes().Get(ctx, "pool-a-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	type nodeView struct {
		Annotations, Labels   map[string]string
		ProviderID            string
		Taints                []corev1.Taint
		Capacity, Allocatable map[string]string
	}
	gotNode := nodeView{
		Annotations: node.Annotations,
		Labels:      node.Labels,
		ProviderID:  node.Spec.ProviderID,
		Taints:      node.Spec.Taints,
		Capacity:    quantities(node.Status.Capacity),
		Allocatable: quantities(node.Status.Allocatable),
	}
	wantNode := nodeView{
		Annotations: map[string]string{
			AnnotationKwokNode:      "fake",
			AnnotationSimulatedBoot: "10ms",
		},
		Labels: map[string]string{
			providers.LabelArch:         "amd64",
			providers.LabelOS:           "linux",
			providers.LabelInstanceType: "kwok-gpu",
			providers.LabelZone:         "zone-a",
			providers.LabelRegion:       "region-1",
			providers.LabelHostname:     "pool-a-1",
			providers.LabelCluster:      testCluster,
			providers.LabelGroup:        "pool-a",
			providers.LabelImageKind:    "prebaked",
			testGPULabel:                "nvidia-t4",
			"team":                      "a",
		},
		ProviderID: "kwok://pool-a-1",
		Taints:     []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}},
		Capacity: map[string]string{
			"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi", "nvidia.com/gpu": "1",
		},
		Allocatable: map[string]string{
			"cpu": "7900m", "memory": "32512Mi", "pods": "110", "ephemeral-storage": "100Gi", "nvidia.com/gpu": "1",
		},
	}
	if diff := cmp.Diff(wantNode, gotNode); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}

	running := want
	running.State = providers.StateRunning
	if diff := cmp.Diff([]providers.Instance{running}, listInstances(t, p)); diff != "" {
		t.Errorf("List after boot (-want +got):\n%s", diff)
	}

	for i := range 2 { // the second Delete finds nothing, which is fine
		if err := p.Delete(ctx, "kwok://pool-a-1"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
		if ok, _ := nodeExists(cs, "pool-a-1")(); ok {
			t.Errorf("after Delete #%d: node still exists", i+1)
		}
		if _, err := cs.CoordinationV1().Leases(DefaultNamespace).Get(ctx, "pool-a-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after Delete #%d: get lease = %v, want NotFound", i+1, err)
		}
		if got := listInstances(t, p); len(got) != 0 {
			t.Errorf("after Delete #%d: List = %v, want none", i+1, got)
		}
	}
}

func TestRestartResumesBootingMachines(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	opts := func(o *Options) {
		o.Boot = BootProfile{Prebaked: 10 * time.Millisecond, RuntimeInstall: time.Hour}
	}
	first := newTestProvider(t, cs, opts)
	ctx := t.Context()

	// "done" boots under the first plugin's Run.
	stop := startRun(t, first)
	if _, err := first.Create(ctx, request("done", "pool-a", "kwok-small", "zone-a", providers.ImagePrebaked)); err != nil {
		t.Fatalf("Create done: %v", err)
	}
	waitFor(t, "node done", nodeExists(cs, "done"))
	stop()

	// "booting" and "slow" are created while no Run is running: the first
	// plugin "crashed" before their boot ended.
	bootingReq := request("booting", "pool-a", "kwok-medium", "zone-a", providers.ImagePrebaked)
	bootingReq.NodeTaints = []providers.Taint{{Key: "k", Effect: "NoExecute"}}
	if _, err := first.Create(ctx, bootingReq); err != nil {
		t.Fatalf("Create booting: %v", err)
	}
	if _, err := first.Create(ctx, request("slow", "pool-b", "kwok-small", "zone-b", providers.ImageRuntimeInstall)); err != nil {
		t.Fatalf("Create slow: %v", err)
	}
	before := listInstances(t, first)
	wantStates := map[string]providers.InstanceState{
		"done": providers.StateRunning, "booting": providers.StateCreating, "slow": providers.StateCreating,
	}
	gotStates := map[string]providers.InstanceState{}
	for _, inst := range before {
		gotStates[inst.Name] = inst.State
	}
	if diff := cmp.Diff(wantStates, gotStates); diff != "" {
		t.Fatalf("first plugin's List states (-want +got):\n%s", diff)
	}

	second := newTestProvider(t, cs, opts)
	if diff := cmp.Diff(before, listInstances(t, second)); diff != "" {
		t.Errorf("restarted plugin's List (-first +second):\n%s", diff)
	}

	startRun(t, second)
	waitFor(t, "node booting", nodeExists(cs, "booting"))
	node, err := cs.CoreV1().Nodes().Get(ctx, "booting", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute}}, node.Spec.Taints); diff != "" {
		t.Errorf("resumed node taints (-want +got):\n%s", diff)
	}
	if got := node.Labels[providers.LabelInstanceType]; got != "kwok-medium" {
		t.Errorf("resumed node instance type = %q, want kwok-medium", got)
	}
	if got := node.Annotations[AnnotationKwokNode]; got != "fake" {
		t.Errorf("resumed node annotation %s = %q, want fake", AnnotationKwokNode, got)
	}

	// "slow" is queued for the boot end its record holds.
	lease, err := cs.CoordinationV1().Leases(DefaultNamespace).Get(ctx, "slow", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantDue, err := time.Parse(time.RFC3339Nano, lease.Annotations[annotationBootEndsAt])
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "only slow to be queued", func() (bool, error) {
		due, ok := second.queue.next()
		return second.queue.len() == 1 && ok && due.Equal(wantDue), nil
	})

	after := listInstances(t, second)
	gotStates = map[string]providers.InstanceState{}
	for _, inst := range after {
		gotStates[inst.Name] = inst.State
	}
	wantStates["booting"] = providers.StateRunning
	if diff := cmp.Diff(wantStates, gotStates); diff != "" {
		t.Errorf("restarted plugin's List states after Run (-want +got):\n%s", diff)
	}
}

func TestRunTwiceIsRefused(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), nil)
	startRun(t, p)
	waitFor(t, "Run to start", func() (bool, error) { return p.running.Load(), nil })
	if err := p.Run(t.Context()); err == nil {
		t.Error("second concurrent Run returned nil, want an error")
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset()
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "minimal", opts: Options{Client: cs, Cluster: "c"}},
		{name: "no client", opts: Options{Cluster: "c"}, wantErr: "Options.Client is nil"},
		{name: "no cluster", opts: Options{Client: cs}, wantErr: "Options.Cluster is empty"},
		{name: "bad cluster", opts: Options{Client: cs, Cluster: "a b"}, wantErr: `Options.Cluster "a b"`},
		{name: "bad namespace", opts: Options{Client: cs, Cluster: "c", Namespace: "Foo"}, wantErr: `Options.Namespace "Foo"`},
		{name: "negative boot", opts: Options{Client: cs, Cluster: "c", Boot: BootProfile{Prebaked: -1}}, wantErr: "negative duration"},
		{name: "negative capacity", opts: Options{Client: cs, Cluster: "c", Capacity: map[string]int{"z": -1}}, wantErr: `Options.Capacity["z"] = -1`},
		{
			name:    "duplicate type",
			opts:    Options{Client: cs, Cluster: "c", MachineTypes: []providers.MachineType{{Name: "a", MilliCPU: 1, MemoryBytes: 1}, {Name: "a", MilliCPU: 1, MemoryBytes: 1}}},
			wantErr: `machine type "a" is listed twice`,
		},
		{
			name:    "unnamed type",
			opts:    Options{Client: cs, Cluster: "c", MachineTypes: []providers.MachineType{{MilliCPU: 1, MemoryBytes: 1}}},
			wantErr: "MachineTypes[0] has no name",
		},
		{
			name:    "empty type",
			opts:    Options{Client: cs, Cluster: "c", MachineTypes: []providers.MachineType{{Name: "a"}}},
			wantErr: `machine type "a": MilliCPU and MemoryBytes must be positive`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestMachineType(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), nil)
	got, err := p.MachineType(t.Context(), "kwok-small", "zone-a")
	if err != nil {
		t.Fatalf("MachineType(kwok-small): %v", err)
	}
	want := providers.MachineType{Name: "kwok-small", MilliCPU: 2000, MemoryBytes: 4 << 30, EphemeralStorageBytes: 100 << 30, Pods: 110, Arch: "amd64", PricePerHour: 0.01}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MachineType(kwok-small) (-want +got):\n%s", diff)
	}

	_, err = p.MachineType(t.Context(), "kwok-huge", "zone-a")
	if !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("MachineType(kwok-huge) error = %v, want one wrapping ErrNotFound", err)
	}
	for _, s := range []string{`"kwok-huge"`, "kwok-gpu, kwok-large, kwok-medium, kwok-small"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("MachineType(kwok-huge) error %q doesn't mention %s", err, s)
		}
	}

	var gpus []string
	for _, mt := range DefaultMachineTypes() {
		if mt.GPUs > 0 {
			gpus = append(gpus, mt.Name+"/"+mt.GPUType)
		}
	}
	if diff := cmp.Diff([]string{"kwok-gpu/nvidia-t4"}, gpus); diff != "" {
		t.Errorf("default GPU types (-want +got):\n%s", diff)
	}
}

func TestIdentity(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, fake.NewClientset(), nil)
	if got := p.Name(); got != "kwok" {
		t.Errorf("Name() = %q, want kwok", got)
	}
	if c := p.Capabilities(); !c.BootsImages || c.UserData != providers.UserDataNone {
		t.Errorf("Capabilities() = %+v, want images booted and no user-data", c)
	}
	for channel, want := range map[string]providers.ImageKind{"stable": providers.ImagePrebaked, "": providers.ImageRuntimeInstall} {
		if got := p.Capabilities().ImageKind(channel); got != want {
			t.Errorf("ImageKind(%q) = %q, want %q", channel, got, want)
		}
	}
}
