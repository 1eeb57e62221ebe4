//go:build e2e

package meshe2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/mesh"
)

const joinClusters = 8

// fakeCilium stands in for Cilium in each cluster (no Cilium runs here): it watches the
// cilium-clustermesh Secret prebake writes into each API server and, pickup after it
// first lists a peer set (the kubelet's volume refresh plus the connection, modelled),
// publishes that cluster's status as Cilium prints it, one agent's `cilium-dbg status -o
// json` followed by KVStoreMesh's `kvstoremesh-dbg status -o json`, to <dir>/<cluster>.json,
// which the status command (cat) prints. Clusters in held publish nothing; flap makes the
// next reports of every reader show a remote not ready.
type fakeCilium struct {
	e      *env
	dir    string
	pickup time.Duration

	mu      sync.Mutex
	seen    map[string]time.Time // cluster → when its current peer set appeared
	peers   map[string][]string
	held    map[string]bool
	flap    map[string]int // remote → reports left that show it down
	flapped int            // reports that showed a flapping remote down
}

func (f *fakeCilium) run(t *testing.T, ctx context.Context) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for c, cs := range f.e.clients {
			s, err := cs.CoreV1().Secrets(f.e.ns).Get(ctx, mesh.SecretClusterMesh, metav1.GetOptions{})
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				continue
			}
			f.observe(t, c, s)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (f *fakeCilium) observe(t *testing.T, cluster string, s *corev1.Secret) {
	var peers []string
	for k, v := range s.Data {
		if !strings.Contains(k, ".") && strings.Contains(string(v), "endpoints:") {
			peers = append(peers, k)
		}
	}
	slices.SortFunc(peers, mesh.Compare)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(peers, f.peers[cluster]) {
		f.peers[cluster], f.seen[cluster] = peers, time.Now()
		return
	}
	if f.held[cluster] || time.Since(f.seen[cluster]) < f.pickup {
		return
	}
	type remote struct {
		Name   string          `json:"name"`
		Ready  bool            `json:"ready"`
		Status string          `json:"status"`
		Synced map[string]bool `json:"synced"`
	}
	rs := []remote{}
	for _, p := range peers {
		r := remote{Name: p, Ready: true, Status: "etcd: 1/1 connected", Synced: map[string]bool{"nodes": true, "services": true, "identities": true, "endpoints": true}}
		if f.flap[p] > 0 {
			f.flap[p]--
			f.flapped++
			r.Ready, r.Status = false, "connection lost, reconnecting"
		}
		rs = append(rs, r)
	}
	agent, err := json.Marshal(map[string]any{"cluster-mesh": map[string]any{"clusters": rs}})
	if err != nil {
		t.Error(err)
		return
	}
	kvs, err := json.Marshal(rs)
	if err != nil {
		t.Error(err)
		return
	}
	tmp := filepath.Join(f.dir, cluster+".json.tmp")
	if err := os.WriteFile(tmp, append(append(agent, '\n'), kvs...), 0o600); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, cluster+".json")); err != nil {
		t.Error(err)
	}
}

func (f *fakeCilium) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// journalCount counts the journal's events per "event cluster".
func journalCount(entries []mesh.JournalEntry) map[string]int {
	out := map[string]int{}
	for _, e := range entries {
		out[e.Event+" "+e.Cluster]++
	}
	return out
}

// TestMeshApplyJoins drives `prebake mesh apply --backend cilium --parallel 4
// --status-command …` against eight kube-apiservers: at most 4 joins are in flight (from
// the journal), an apply killed with joins in flight resumes without redoing the
// finished ones, and a remote that flaps while the others wait for it makes nothing be
// written again.
func TestMeshApplyJoins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	e := startClusters(t, ctx, joinClusters)
	ca := newCA(t, "mesh-ca")
	for _, cs := range e.clients {
		if _, err := cs.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: mesh.SecretCA, Namespace: e.ns},
			Data:       map[string][]byte{"ca.crt": ca},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildPrebake(t, ctx)
	ids := make([]int, joinClusters)
	for i := range ids {
		ids[i] = i + 1
	}
	file := clustersFile(t, ids...)
	journal := strings.TrimSuffix(file, ".yaml") + ".journal"
	statusDir := t.TempDir()

	fc := &fakeCilium{e: e, dir: statusDir, pickup: 300 * time.Millisecond,
		seen: map[string]time.Time{}, peers: map[string][]string{}, held: map[string]bool{}, flap: map[string]int{}}
	// c5..c8 never report ready in the first run: their joins are in flight when it is
	// killed.
	for _, c := range []string{"c5", "c6", "c7", "c8"} {
		fc.held[c] = true
	}
	simCtx, stopSim := context.WithCancel(ctx)
	var simDone sync.WaitGroup
	simDone.Go(func() { fc.run(t, simCtx) })
	t.Cleanup(func() { stopSim(); simDone.Wait() })

	apply := func() *exec.Cmd {
		cmd := exec.CommandContext(ctx, bin, "mesh", "apply", "--backend", "cilium", "--clusters", file, "--kubeconfig", e.kubeconfig,
			"--parallel", "4", "--status-command", "cat "+statusDir+"/{cluster}.json", "--poll", "50ms", "--join-timeout", "5m")
		cmd.Stdout, cmd.Stderr = logWriter{t}, logWriter{t}
		return cmd
	}

	// Run 1, killed once c1..c4 are done and c5..c8 are written and waiting.
	began := time.Now()
	run1 := apply()
	if err := run1.Start(); err != nil {
		t.Fatal(err)
	}
	var first []mesh.JournalEntry
	waitFor(t, ctx, "run 1: c1..c4 done, c5..c8 written", func() bool {
		var err error
		if first, err = mesh.ReadJournal(journal); err != nil {
			t.Fatal(err)
		}
		n := journalCount(first)
		for i := 1; i <= joinClusters; i++ {
			c := fmt.Sprintf("c%d", i)
			if n["write "+c] != 1 || (i <= 4) != (n["done "+c] == 1) {
				return false
			}
		}
		// The writes of c5..c8 are journalled before they are made: wait for the objects.
		for _, c := range []string{"c5", "c6", "c7", "c8"} {
			if _, err := e.clients[c].CoreV1().Secrets(e.ns).Get(ctx, mesh.SecretClusterMesh, metav1.GetOptions{}); err != nil {
				return false
			}
		}
		return true
	})
	if err := run1.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = run1.Wait()
	killedAfter := time.Since(began)
	first, err := mesh.ReadJournal(journal)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"c5", "c6", "c7", "c8"} {
		if n := journalCount(first)["done "+c]; n != 0 {
			t.Fatalf("%s finished before the kill", c)
		}
	}
	before := e.versions(t, ctx)

	// Run 2: c5..c8 report, but c2 flaps in their first reports.
	fc.set(func() {
		for _, c := range []string{"c5", "c6", "c7", "c8"} {
			fc.held[c] = false
		}
		fc.flap["c2"] = 6
	})
	began = time.Now()
	if err := apply().Run(); err != nil {
		t.Fatalf("run 2: %v", err)
	}
	resumedIn := time.Since(began)
	all, err := mesh.ReadJournal(journal)
	if err != nil {
		t.Fatal(err)
	}
	second := all[len(first):]
	n2 := journalCount(second)
	var got []string
	for _, en := range second {
		got = append(got, en.Event+" "+en.Cluster)
	}
	for i := 1; i <= joinClusters; i++ {
		c := fmt.Sprintf("c%d", i)
		switch {
		case i <= 4 && (n2["write "+c]+n2["wait "+c]+n2["done "+c]) != 0:
			t.Errorf("run 2 redid %s, finished in run 1: %v", c, got)
		case i > 4 && (n2["write "+c] != 0 || n2["wait "+c] != 1 || n2["done "+c] != 1):
			t.Errorf("run 2 should only wait for %s (written in run 1): %v", c, got)
		}
	}
	if ch := changed(before, e.versions(t, ctx)); len(ch) != 0 {
		t.Errorf("run 2 wrote %v; every cluster was written in run 1", ch)
	}
	fc.mu.Lock()
	flapped := fc.flapped
	fc.mu.Unlock()
	if flapped == 0 {
		t.Error("c2 never showed down: the flap was not exercised")
	}
	inFlight := mesh.MaxInFlight(all)
	if inFlight > 4 {
		t.Errorf("journal shows %d joins in flight with --parallel 4", inFlight)
	}
	if in1 := mesh.MaxInFlight(first); in1 != 4 {
		t.Errorf("run 1 had at most %d joins in flight; with 8 clusters and --parallel 4 it should fill the 4", in1)
	}
	members := make([]string, joinClusters)
	for i := range members {
		members[i] = fmt.Sprintf("c%d", i+1)
	}
	clusters, err := mesh.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	clients, err := mesh.KubeClients(clusters, e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := mesh.NewCilium(clusters, clients, mesh.CiliumOptions{KVStoreMesh: true})
	if err != nil {
		t.Fatal(err)
	}
	e.checkExactPeers(t, ctx, b, members)
	t.Logf("joins of %d clusters, --parallel 4: run 1 killed after %s with c1..c4 done and c5..c8 waiting; run 2 (c2 flapping %d reports) finished in %s, writing nothing; most joins in flight: %d",
		joinClusters, killedAfter.Round(time.Millisecond), flapped, resumedIn.Round(time.Millisecond), inFlight)
}

// waitFor polls cond every 50 ms until it holds, or fails t when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}
