package mesh

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/prebake-dev/prebake/mesh/ciliumfake"
)

const ns = DefaultCiliumNamespace

var allSynced = &RemoteSynced{Nodes: true, Services: true, Identities: true, Endpoints: true}

// agentJSON is what `cilium-dbg status -o json` prints, as far as a join reads it.
func agentJSON(t *testing.T, remotes ...RemoteStatus) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"cluster-mesh": map[string]any{"clusters": remotes}, "kvstore": map[string]any{"state": "Ok"}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// kvstoremeshJSON is what `clustermesh-apiserver kvstoremesh-dbg status -o json` prints.
func kvstoremeshJSON(t *testing.T, remotes ...RemoteStatus) string {
	t.Helper()
	b, err := json.Marshal(remotes)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func newFakeCluster(t *testing.T) *ciliumfake.Cluster {
	t.Helper()
	c := ciliumfake.New()
	t.Cleanup(c.Close)
	return c
}

func execStatus(t *testing.T, configs map[string]*rest.Config, kvstoremesh bool) *ExecStatus {
	t.Helper()
	r, err := NewExecStatus(configs, ExecStatusOptions{KVStoreMesh: kvstoremesh})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestExecStatusReadsOneAgentAndEveryKVStoreMesh: the built-in reader finds the agents
// through the DaemonSet's selector, as kubectl exec ds/cilium does, asks one running,
// ready agent, asks every clustermesh-apiserver replica's KVStoreMesh, and names the pod
// that holds a join back.
func TestExecStatusReadsOneAgentAndEveryKVStoreMesh(t *testing.T) {
	t.Parallel()
	f := newFakeCluster(t)
	_, apiservers := f.Install(ns, 0, 2)
	agentLabels := map[string]string{"k8s-app": "cilium"}
	f.Add(ciliumfake.RunningPod(ns, "cilium-a", agentLabels, false)) // running, not ready
	f.Add(ciliumfake.RunningPod(ns, "cilium-b", agentLabels, true))  // the one to ask
	pending := ciliumfake.RunningPod(ns, "cilium-0", agentLabels, true)
	pending.Status.Phase = corev1.PodPending
	f.Add(pending)
	f.Add(ciliumfake.RunningPod(ns, "aaa-other", map[string]string{"k8s-app": "other"}, true)) // not selected
	f.Add(ciliumfake.RunningPod("other-ns", "cilium-x", agentLabels, true))                    // other namespace

	f.SetExec(func(pod, container string, argv []string) (string, string, int) {
		if container == AgentContainer {
			return agentJSON(t, RemoteStatus{Name: "c2", Ready: true, Status: "connected"}), "", 0
		}
		synced := allSynced
		if pod == apiservers[1] {
			synced = &RemoteSynced{Nodes: true} // the second replica is still syncing
		}
		return kvstoremeshJSON(t, RemoteStatus{Name: "c2", Ready: true, Synced: synced}), "", 0
	})
	r := execStatus(t, map[string]*rest.Config{"c1": f.RESTConfig()}, true)
	st, err := r.MeshStatus(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	want := []ciliumfake.ExecCall{
		{Namespace: ns, Pod: "cilium-b", Container: "cilium-agent", Command: []string{"cilium-dbg", "status", "-o", "json"}},
		{Namespace: ns, Pod: apiservers[0], Container: "kvstoremesh", Command: []string{"clustermesh-apiserver", "kvstoremesh-dbg", "status", "-o", "json"}},
		{Namespace: ns, Pod: apiservers[1], Container: "kvstoremesh", Command: []string{"clustermesh-apiserver", "kvstoremesh-dbg", "status", "-o", "json"}},
	}
	if diff := cmp.Diff(want, f.Execs()); diff != "" {
		t.Errorf("exec calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ns + "/cilium-b"}, st.AgentPods); diff != "" {
		t.Errorf("agent pods (-want +got):\n%s", diff)
	}
	got := st.Missing([]string{"c2"}, true)
	if diff := cmp.Diff([]string{"c2: KVStoreMesh " + ns + "/" + apiservers[1] + ": not synchronised yet"}, got); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}
	if got := st.Missing([]string{"c2"}, false); got != nil {
		t.Errorf("without KVStoreMesh c2 is ready in the agent; Missing says %v", got)
	}

	// Without KVStoreMesh only the agent is asked.
	before := len(f.Execs())
	if _, err := execStatus(t, map[string]*rest.Config{"c1": f.RESTConfig()}, false).MeshStatus(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	if calls := f.Execs()[before:]; len(calls) != 1 || calls[0].Container != AgentContainer {
		t.Errorf("KVStoreMesh off: exec calls %+v, want the agent's only", calls)
	}
}

func TestExecStatusErrors(t *testing.T) {
	t.Parallel()
	printAgent := func(t *testing.T) ciliumfake.ExecFunc {
		return func(_, container string, _ []string) (string, string, int) {
			if container == AgentContainer {
				return agentJSON(t, RemoteStatus{Name: "c2", Ready: true}), "", 0
			}
			return kvstoremeshJSON(t, RemoteStatus{Name: "c2", Ready: true, Synced: allSynced}), "", 0
		}
	}
	tests := []struct {
		name        string
		setup       func(t *testing.T, f *ciliumfake.Cluster)
		kvstoremesh bool
		want        []string
	}{{
		name: "the command fails",
		setup: func(t *testing.T, f *ciliumfake.Cluster) {
			f.Install(ns, 1, 0)
			f.SetExec(func(string, string, []string) (string, string, int) {
				return "", "Error: Get \"http:///var/run/cilium/cilium.sock/v1/healthz\": dial unix: connect: no such file or directory\n", 1
			})
		},
		want: []string{`cluster "c1": exec in pod kube-system/cilium-p1, container cilium-agent: cilium-dbg status -o json: command terminated with exit code 1`, "cilium.sock"},
	}, {
		name: "exec is forbidden",
		setup: func(t *testing.T, f *ciliumfake.Cluster) {
			f.Install(ns, 1, 0)
			f.ForbidExec("dev")
		},
		want: []string{`pods/exec`, "forbidden", "needs the verb create on pods/exec", "--status-command", "--no-wait"},
	}, {
		name: "KVStoreMesh on, no clustermesh-apiserver",
		setup: func(t *testing.T, f *ciliumfake.Cluster) {
			f.Install(ns, 1, 0)
			f.SetExec(printAgent(t))
		},
		kvstoremesh: true,
		want:        []string{"deployment kube-system/clustermesh-apiserver not found", "--kvstoremesh=false"},
	}, {
		name:  "Cilium not installed",
		setup: func(*testing.T, *ciliumfake.Cluster) {},
		want:  []string{"daemonset kube-system/cilium not found", "--namespace"},
	}, {
		name: "no agent running",
		setup: func(t *testing.T, f *ciliumfake.Cluster) {
			f.Install(ns, 0, 0)
			p := ciliumfake.RunningPod(ns, "cilium-p1", map[string]string{"k8s-app": "cilium"}, false)
			p.Status.Phase = corev1.PodPending
			f.Add(p)
		},
		want: []string{"no running pod of daemonset kube-system/cilium (1 pods match k8s-app=cilium)"},
	}, {
		name: "a DaemonSet without selector",
		setup: func(t *testing.T, f *ciliumfake.Cluster) {
			f.Add(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cilium"}})
		},
		want: []string{"daemonset kube-system/cilium has no selector"},
	}, {
		name: "not Cilium's JSON",
		setup: func(t *testing.T, f *ciliumfake.Cluster) {
			f.Install(ns, 1, 0)
			f.SetExec(func(string, string, []string) (string, string, int) { return "KVStore: Ok\n", "", 0 })
		},
		want: []string{"container cilium-agent: cilium-dbg status -o json printed something else than Cilium's status JSON"},
	}, {
		name: "the agent prints a KVStoreMesh status",
		setup: func(t *testing.T, f *ciliumfake.Cluster) {
			f.Install(ns, 1, 0)
			f.SetExec(func(string, string, []string) (string, string, int) {
				return kvstoremeshJSON(t, RemoteStatus{Name: "c2", Ready: true}), "", 0
			})
		},
		want: []string{"printed 0 agent and 1 KVStoreMesh documents, want one of its own kind"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeCluster(t)
			tt.setup(t, f)
			_, err := execStatus(t, map[string]*rest.Config{"c1": f.RESTConfig()}, tt.kvstoremesh).MeshStatus(context.Background(), "c1")
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if _, err := execStatus(t, nil, false).MeshStatus(context.Background(), "c9"); err == nil || !strings.Contains(err.Error(), `cluster "c9": no Kubernetes client`) {
		t.Errorf("unknown cluster: %v", err)
	}
}

// scriptedCilium makes a fake cluster's Cilium report the given peers: not ready for the
// first notReady agent reads, then ready (never, while hold is set), KVStoreMesh synced.
type scriptedCilium struct {
	peers    []string
	notReady int

	mu      sync.Mutex // guards reads and hold
	reads   int        // agent reads
	hold    bool
	readyAt int // the read that first reported every peer ready; 0 before
}

func (s *scriptedCilium) exec(t *testing.T) ciliumfake.ExecFunc {
	return func(_, container string, _ []string) (string, string, int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		var rs []RemoteStatus
		ready := true
		if container == AgentContainer {
			s.reads++
			ready = s.reads > s.notReady && !s.hold
			if ready && s.readyAt == 0 {
				s.readyAt = s.reads
			}
		}
		for _, p := range s.peers {
			r := RemoteStatus{Name: p, Ready: ready, Connected: true, Status: "Waiting for initial connection to be established", Synced: allSynced}
			if ready {
				r.Status = "etcd: 1/1 connected"
			}
			rs = append(rs, r)
		}
		if container == AgentContainer {
			return agentJSON(t, rs...), "", 0
		}
		return kvstoremeshJSON(t, rs...), "", 0
	}
}

func (s *scriptedCilium) state() (reads, readyAt int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.readyAt
}

// TestExecStatusJoinWaitsUntilReady: with the built-in reader, a join is done only once the
// cluster's agent reports every peer ready, and not polled after; a cluster that never
// gets ready times out alone, and the journal lets a re-run wait for it only.
func TestExecStatusJoinWaitsUntilReady(t *testing.T) {
	t.Parallel()
	const n = 3
	all := names(n)
	configs := map[string]*rest.Config{}
	scripts := map[string]*scriptedCilium{}
	for _, c := range all {
		f := newFakeCluster(t)
		f.Install(ns, 2, 1)
		s := &scriptedCilium{peers: withoutSelf(c, all), notReady: 2}
		f.SetExec(s.exec(t))
		configs[c], scripts[c] = f.RESTConfig(), s
	}
	scripts["c3"].hold = true
	sim := NewSimulated(0, nil)
	path := filepath.Join(t.TempDir(), "apply.journal")
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{Parallel: 2, Status: execStatus(t, configs, true), KVStoreMesh: true, PollInterval: time.Millisecond, JoinTimeout: 2 * time.Second, Journal: j}
	res, err := e.Declarative(context.Background(), sim, all, FullMesh(all...))
	if err == nil || len(res.Failures) != 1 || res.Failures[0].Op != "join c3" {
		t.Fatalf("want join c3 to time out, got %v, failures %+v", err, res.Failures)
	}
	if msg := res.Failures[0].Err.Error(); !strings.Contains(msg, `cluster "c3": not joined after 2s (--join-timeout): c1: agent kube-system/cilium-p1: not ready (Waiting for initial connection to be established)`) {
		t.Errorf("c3's failure: %s", msg)
	}
	for _, c := range []string{"c1", "c2"} {
		// Reads 1 and 2 say not ready, read 3 says ready: the join ends there, no sooner,
		// no later.
		if reads, readyAt := scripts[c].state(); readyAt != 3 || reads != 3 {
			t.Errorf("%s: join done after %d agent reads (first ready: read %d), want 3 (3)", c, reads, readyAt)
		}
	}
	entries, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range entries {
		got = append(got, en.Event+" "+en.Cluster)
	}
	if count := strings.Count(strings.Join(got, ","), "done "); count != 2 || !strings.Contains(strings.Join(got, ","), "failed c3") {
		t.Errorf("journal %v: want c1 and c2 done, c3 failed", got)
	}

	// c3 gets ready; the re-run waits for it only: no write, c1 and c2 untouched.
	scripts["c3"].mu.Lock()
	scripts["c3"].hold = false
	scripts["c3"].mu.Unlock()
	reads1, _ := scripts["c1"].state()
	j2, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	e.Journal = j2
	res, err = e.Declarative(context.Background(), sim, all, FullMesh(all...))
	if err != nil {
		t.Fatal(err)
	}
	if reads, _ := scripts["c1"].state(); res.Finished != 2 || res.Ops != 1 || res.Writes != 0 || sim.Stats().Calls != n || reads != reads1 {
		t.Errorf("resume: %d finished, %d joins, %d writes (%d in all), c1 read %d more times; want 2, 1, 0 (%d), 0",
			res.Finished, res.Ops, res.Writes, sim.Stats().Calls, reads-reads1, n)
	}
	entries, err = ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, en := range entries[len(entries)-2:] {
		got = append(got, en.Event+" "+en.Cluster)
	}
	if diff := cmp.Diff([]string{"wait c3", "done c3"}, got); diff != "" {
		t.Errorf("the re-run's journal (-want +got):\n%s", diff)
	}
}
