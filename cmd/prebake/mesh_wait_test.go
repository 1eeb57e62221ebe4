package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/prebake-dev/prebake/mesh"
	"github.com/prebake-dev/prebake/mesh/ciliumfake"
)

func TestJoinWait(t *testing.T) {
	t.Parallel()
	builtin := &mesh.ExecStatus{}
	calls := 0
	newBuiltin := func() (mesh.StatusReader, error) { calls++; return builtin, nil }
	cmdReader := &mesh.StatusCommand{Template: "cat {cluster}.json"}
	none := &mesh.StatusCommand{}
	tests := []struct {
		name        string
		backend     string
		noWait      bool
		status      *mesh.StatusCommand
		kvstoremesh bool
		want        mesh.StatusReader
		note        string
		err         string
	}{
		{name: "cilium waits by default", backend: "cilium", status: none, kvstoremesh: true, want: builtin,
			note: "waiting for each join: cilium-dbg status in one agent and kvstoremesh-dbg status in every clustermesh-apiserver pod (pods/exec)"},
		{name: "cilium without KVStoreMesh", backend: "cilium", status: none, want: builtin,
			note: "waiting for each join: cilium-dbg status in one agent (pods/exec)"},
		{name: "--status-command overrides", backend: "cilium", status: cmdReader, want: cmdReader, note: "waiting for each join: --status-command"},
		{name: "--status-command with helm-values", backend: "helm-values", status: cmdReader, want: cmdReader, note: "--status-command"},
		{name: "--no-wait", backend: "cilium", noWait: true, status: none, note: "--no-wait: a join counts as done once written; nothing checks that Cilium connected the peers"},
		{name: "helm-values does not wait", backend: "helm-values", status: none},
		{name: "both", backend: "cilium", noWait: true, status: cmdReader, err: "--no-wait and --status-command contradict each other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls = 0
			r, note, err := joinWait(tt.backend, tt.noWait, tt.status, tt.kvstoremesh, newBuiltin)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r != tt.want {
				t.Errorf("reader %#v, want %#v", r, tt.want)
			}
			if wantCalls := map[bool]int{true: 1}[tt.want == builtin]; calls != wantCalls {
				t.Errorf("built-in reader made %d times, want %d", calls, wantCalls)
			}
			if !strings.Contains(note, tt.note) || (tt.note == "") != (note == "") {
				t.Errorf("note %q, want it to contain %q", note, tt.note)
			}
		})
	}
}

// fakeCilium scripts what Cilium in one fake cluster reports: every peer not ready for its
// agent's first notReady reads (always, while held), then ready; KVStoreMesh synced.
type fakeCilium struct {
	peers    []string
	notReady int

	mu      sync.Mutex // guards the fields below
	held    bool
	reads   int // agent reads
	readyAt int // the agent read that first reported every peer ready
}

func (f *fakeCilium) exec(_, container string, _ []string) (string, string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ready := true
	if container == mesh.AgentContainer {
		f.reads++
		ready = f.reads > f.notReady && !f.held
		if ready && f.readyAt == 0 {
			f.readyAt = f.reads
		}
	}
	var rs []mesh.RemoteStatus
	for _, p := range f.peers {
		status := "Waiting for initial connection to be established"
		if ready {
			status = "etcd: 1/1 connected"
		}
		rs = append(rs, mesh.RemoteStatus{Name: p, Ready: ready, Status: status,
			Synced: &mesh.RemoteSynced{Nodes: true, Services: true, Identities: true, Endpoints: true}})
	}
	var doc any = rs
	if container == mesh.AgentContainer {
		doc = map[string]any{"cluster-mesh": map[string]any{"clusters": rs}}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err.Error(), 2
	}
	return string(b) + "\n", "", 0
}

func (f *fakeCilium) state() (reads, readyAt int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads, f.readyAt
}

// TestMeshApplyCiliumWaitsByDefault: `mesh apply --backend cilium` without --status-command
// or --no-wait reads each cluster's Cilium status through pods/exec (fake API servers on
// loopback) and counts a join only once its peers are ready; a cluster that never gets
// ready fails alone after --join-timeout, and the re-run waits for it only. The clusters'
// objects are written beforehand (the fake API server is read-only), so the joins only
// wait.
func TestMeshApplyCiliumWaitsByDefault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := []string{"a", "b", "c"}
	var file, kubeconfig strings.Builder
	file.WriteString("clusters:\n")
	kubeconfig.WriteString("apiVersion: v1\nkind: Config\n")
	fakes := map[string]*ciliumfake.Cluster{}
	var clusters, contexts strings.Builder
	for i, n := range names {
		f := ciliumfake.New()
		t.Cleanup(f.Close)
		f.Install(mesh.DefaultCiliumNamespace, 2, 1)
		fakes[n] = f
		fmt.Fprintf(&file, "  - name: %s\n    id: %d\n    context: ctx-%s\n    clustermeshAPIServer: 10.0.0.%d:32379\n", n, i+1, n, i+1)
		fmt.Fprintf(&clusters, "  - name: %s\n    cluster: {server: %q}\n", n, f.URL())
		fmt.Fprintf(&contexts, "  - name: ctx-%s\n    context: {cluster: %s, user: u}\n", n, n)
	}
	kubeconfig.WriteString("clusters:\n" + clusters.String() + "contexts:\n" + contexts.String() + "users:\n  - name: u\n    user: {token: t}\n")
	clustersFile := filepath.Join(dir, "clusters.yaml")
	kcFile := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(clustersFile, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kcFile, []byte(kubeconfig.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	// Each cluster holds the objects of a full mesh, as a finished write leaves them.
	loaded, err := mesh.LoadFile(clustersFile)
	if err != nil {
		t.Fatal(err)
	}
	configs := map[string]*rest.Config{}
	for n, f := range fakes {
		configs[n] = f.RESTConfig()
	}
	clients, err := mesh.ClientsFor(loaded, configs)
	if err != nil {
		t.Fatal(err)
	}
	renderer, err := mesh.NewCilium(loaded, clients, mesh.CiliumOptions{KVStoreMesh: true})
	if err != nil {
		t.Fatal(err)
	}
	scripts := map[string]*fakeCilium{}
	for _, n := range names {
		var peers []string
		for _, p := range names {
			if p != n {
				peers = append(peers, p)
			}
		}
		objs, err := renderer.Objects(n, peers)
		if err != nil {
			t.Fatal(err)
		}
		secret := func(name string, data map[string]string) *corev1.Secret {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mesh.DefaultCiliumNamespace, Name: name}, Data: map[string][]byte{}}
			for k, v := range data {
				s.Data[k] = []byte(v)
			}
			return s
		}
		fakes[n].Add(secret(mesh.SecretClusterMesh, objs.ClusterMesh))
		fakes[n].Add(secret(mesh.SecretKVStoreMesh, objs.KVStoreMesh))
		fakes[n].Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: mesh.DefaultCiliumNamespace, Name: mesh.ConfigMapRemoteUsers},
			Data: map[string]string{mesh.RemoteUsersKey: objs.RemoteUsers}})
		scripts[n] = &fakeCilium{peers: peers}
		fakes[n].SetExec(scripts[n].exec)
	}
	scripts["a"].notReady = 2
	scripts["c"].held = true

	args := []string{"apply", "--backend", "cilium", "--clusters", clustersFile, "--kubeconfig", kcFile, "--poll", "1ms", "--join-timeout", "1s"}
	out, err := runMesh(t, args...)
	if err == nil {
		t.Fatalf("c never reports ready, yet apply succeeded:\n%s", out)
	}
	for _, want := range []string{
		"waiting for each join: cilium-dbg status in one agent and kvstoremesh-dbg status in every clustermesh-apiserver pod (pods/exec)",
		"join a: 2 peers ready after",
		"join b: 2 peers ready after",
		`failed: round 1: join c after 1 attempts: cluster "c": not joined after 1s (--join-timeout): a: agent kube-system/cilium-p1: not ready (Waiting for initial connection to be established)`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("first apply lacks %q:\n%s", want, out)
		}
	}
	// a said "not ready" twice, then ready: its join ended at that third read.
	if reads, readyAt := scripts["a"].state(); reads != 3 || readyAt != 3 {
		t.Errorf("a: join ended after %d agent reads, first ready at read %d; want 3, 3", reads, readyAt)
	}
	journal := filepath.Join(dir, "clusters.journal")
	entries, err := mesh.ReadJournal(journal)
	if err != nil {
		t.Fatal(err)
	}
	events := func(es []mesh.JournalEntry) map[string]string {
		m := map[string]string{}
		for _, e := range es {
			m[e.Cluster] += e.Event + " "
		}
		return m
	}
	if diff := cmp.Diff(map[string]string{"a": "wait done ", "b": "wait done ", "c": "wait failed "}, events(entries)); diff != "" {
		t.Errorf("journal of the first apply (-want +got):\n%s", diff)
	}
	for n, f := range fakes {
		for _, c := range f.Execs() {
			if c.Container != mesh.AgentContainer && c.Container != mesh.KVStoreMeshContainer {
				t.Errorf("%s: exec into container %q", n, c.Container)
			}
		}
	}

	// c gets ready: the re-run waits for c only.
	scripts["c"].mu.Lock()
	scripts["c"].held = false
	scripts["c"].mu.Unlock()
	readsA, _ := scripts["a"].state()
	out, err = runMesh(t, args...)
	if err != nil {
		t.Fatalf("re-run: %v\n%s", err, out)
	}
	for _, want := range []string{"join c: 2 peers ready after", "joins: 0 written, 1 only awaited (written before), 2 skipped (done per the journal)"} {
		if !strings.Contains(out, want) {
			t.Errorf("re-run lacks %q:\n%s", want, out)
		}
	}
	if reads, _ := scripts["a"].state(); reads != readsA {
		t.Errorf("the re-run read a's status %d times; its join was done", reads-readsA)
	}
	all, err := mesh.ReadJournal(journal)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"c": "wait done "}, events(all[len(entries):])); diff != "" {
		t.Errorf("journal of the re-run (-want +got):\n%s", diff)
	}
}

// TestMeshApplyNoWait: --no-wait counts a join as done once written and says so, in the
// log, the summary and the journal; a later run that waits only waits for those joins.
func TestMeshApplyNoWait(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "clusters.yaml")
	if err := os.WriteFile(file, []byte("clusters:\n  - name: a\n    clustermeshAPIServer: a.example:2379\n  - name: b\n    clustermeshAPIServer: b.example:2379\n  - name: c\n    clustermeshAPIServer: c.example:2379\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(dir, "values")
	base := []string{"apply", "--clusters", file, "--backend", "helm-values", "--out", values}
	out, err := runMesh(t, append(base, "--no-wait")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"--no-wait: a join counts as done once written; nothing checks that Cilium connected the peers",
		"joins: 3 not verified: written, but Cilium's status was not read",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--no-wait output lacks %q:\n%s", want, out)
		}
	}
	journal := filepath.Join(dir, "clusters.journal")
	entries, err := mesh.ReadJournal(journal)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if e.Event != mesh.JournalWrite {
			got = append(got, e.Event+" "+e.Cluster+" "+e.Detail)
		}
	}
	slices.Sort(got)
	unverified := " written; not verified: Cilium's status was not read"
	if diff := cmp.Diff([]string{"unverified a" + unverified, "unverified b" + unverified, "unverified c" + unverified}, got); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}

	// A run that waits (here with --status-command) waits for all three, writes none.
	script := filepath.Join(dir, "status.sh")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
echo '{"cluster-mesh": {"clusters": [{"name": "a", "ready": true}, {"name": "b", "ready": true}, {"name": "c", "ready": true}]}}'
`), 0o700); err != nil {
		t.Fatal(err)
	}
	out, err = runMesh(t, append(base, "--status-command", script, "--poll", "1ms")...)
	if err != nil || !strings.Contains(out, "joins: 0 written, 3 only awaited (written before), 0 skipped") || strings.Contains(out, "not verified") {
		t.Errorf("waiting run after --no-wait: %v\n%s", err, out)
	}
	if _, err := runMesh(t, append(base, "--no-wait", "--status-command", script)...); err == nil || !strings.Contains(err.Error(), "--no-wait and --status-command contradict") {
		t.Errorf("--no-wait with --status-command: %v", err)
	}
}
