package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/mesh"
)

// runMesh runs `prebake mesh args…` and returns what it printed on stdout.
func runMesh(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, _, err := runMeshStderr(t, args...)
	return out, err
}

func runMeshStderr(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newMeshCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestMeshPlanAcceptance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args                       []string
		rounds, pairs, lowerBound  int
		firstRoundLen, lastRoundLn int
	}{
		{[]string{"--generate", "511", "--max-connected-clusters", "511"}, 511, 130305, 511, 255, 255},
		{[]string{"--generate", "300", "--max-connected-clusters", "511"}, 299, 44850, 299, 150, 150},
		{[]string{"--generate", "255"}, 255, 32385, 255, 127, 127},
		{[]string{"--generate", "511", "--existing", "510", "--max-connected-clusters", "511"}, 510, 510, 510, 1, 1},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			out, err := runMesh(t, append([]string{"plan", "-o", "json"}, tt.args...)...)
			if err != nil {
				t.Fatalf("mesh plan: %v\n%s", err, out)
			}
			var got struct {
				Rounds [][]struct {
					A string `json:"a"`
					B string `json:"b"`
				} `json:"rounds"`
				RoundCount int `json:"roundCount"`
				PairCount  int `json:"pairCount"`
				LowerBound int `json:"lowerBound"`
			}
			dec := json.NewDecoder(strings.NewReader(out))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if g, w := [3]int{got.RoundCount, got.PairCount, got.LowerBound}, [3]int{tt.rounds, tt.pairs, tt.lowerBound}; g != w {
				t.Errorf("roundCount, pairCount, lowerBound = %v, want %v", g, w)
			}
			if len(got.Rounds) != tt.rounds || len(got.Rounds[0]) != tt.firstRoundLen || len(got.Rounds[len(got.Rounds)-1]) != tt.lastRoundLn {
				t.Errorf("rounds: %d, first holds %d, last holds %d", len(got.Rounds), len(got.Rounds[0]), len(got.Rounds[len(got.Rounds)-1]))
			}
		})
	}
}

func TestMeshPlanTable(t *testing.T) {
	t.Parallel()
	out, err := runMesh(t, "plan", "--generate", "4")
	if err != nil {
		t.Fatal(err)
	}
	want := `clusters 4 (existing 0)  pairs 6  rounds 3  lowerBound 3  method circle

ROUND  PAIRS  OPERATIONS
1      2      c1-c4 c2-c3
2      2      c1-c3 c2-c4
3      2      c1-c2 c3-c4
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestMeshPlanClustersFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "clusters.yaml")
	if err := os.WriteFile(good, []byte("clusters:\n  - name: a\n  - name: b\n  - name: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runMesh(t, "plan", "--clusters", good, "--existing", "2", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"rounds":[[{"a":"b","b":"c"}],[{"a":"a","b":"c"}]],"roundCount":2,"pairCount":2,"lowerBound":2}` + "\n"
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("json (-want +got):\n%s", diff)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("clusters:\n  - name: a\n    id: 300\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runMesh(t, "plan", "--clusters", bad); err == nil || !strings.Contains(err.Error(), `cluster "a" (`+bad+`:2): id 300 needs maxConnectedClusters: 511`) {
		t.Errorf("bad file: error %v", err)
	}
}

func TestMeshPlanFlagErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"plan"}, "at least one of the flags in the group [clusters generate] is required"},
		{[]string{"plan", "--generate", "3", "--clusters", "x"}, "were all set"},
		{[]string{"plan", "--generate", "3", "--existing", "4"}, "--existing 4: want 0..3"},
		{[]string{"plan", "--generate", "3", "-o", "yaml"}, `-o "yaml": want table or json`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			_, err := runMesh(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestMeshApply(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "clusters.yaml")
	body := `clusters:
  - name: a
    clustermeshAPIServer: 10.0.0.1:32379
  - name: b
    clustermeshAPIServer: 10.0.0.2:32379
  - name: c
    clustermeshAPIServer: 10.0.0.3:32379
`
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(dir, "values")

	out, err := runMesh(t, "apply", "--clusters", file, "--backend", "helm-values", "--out", values, "--dry-run")
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	for _, want := range []string{"dry-run: would set a peers to [b c]", "declarative  1/1     3", "dry-run: nothing was written"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(values); !os.IsNotExist(err) {
		t.Errorf("dry run created %s: %v", values, err)
	}

	if out, err = runMesh(t, "apply", "--clusters", file, "--backend", "helm-values", "--out", values); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(values, "b.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: b\n  id: 2\n", "      a:\n        ips:\n          - 10.0.0.1\n        port: 32379\n", "      c:\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("b.yaml lacks %q:\n%s", want, got)
		}
	}
	out, err = runMesh(t, "status", "--clusters", file, "--backend", "helm-values", "--out", values)
	if err != nil || !strings.Contains(out, "all 3 clusters list exactly their peers") {
		t.Errorf("status: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(values, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	out, err = runMesh(t, "status", "--clusters", file, "--backend", "helm-values", "--out", values)
	if err != nil || !strings.Contains(out, "c        0           a,b      -") || !strings.Contains(out, "1 of 3 clusters need a write") {
		t.Errorf("status after removing c.yaml: %v\n%s", err, out)
	}
	// Only c is written again.
	if out, err = runMesh(t, "apply", "--clusters", file, "--backend", "helm-values", "--out", values); err != nil || !strings.Contains(out, "declarative  1/1     1") {
		t.Errorf("repair: %v\n%s", err, out)
	}
	// Again: nothing to write.
	if out, err = runMesh(t, "apply", "--clusters", file, "--backend", "helm-values", "--out", values); err != nil || !strings.Contains(out, "declarative  0/0     0") {
		t.Errorf("re-apply: %v\n%s", err, out)
	}
}

func TestMeshApplySimulatedPairwise(t *testing.T) {
	t.Parallel()
	out, err := runMesh(t, "apply", "--generate", "6", "--existing", "2", "--backend", "simulated", "--mode", "pairwise", "--op-time", "0")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Adding 4 to 2: Δ = 5 rounds, 4·2 + 6 = 14 pairs.
	for _, want := range []string{"round 5/5:", "total 14/14 done, 0 failed", "circle-split  5/5     14          14         0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestMeshApplyErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"apply", "--generate", "3"}, `required flag(s) "backend" not set`},
		{[]string{"apply", "--generate", "3", "--backend", "cilium"}, "--backend cilium needs --clusters"},
		{[]string{"apply", "--generate", "3", "--backend", "command"}, "--backend command needs --command"},
		{[]string{"apply", "--generate", "3", "--backend", "command", "--command", "true", "--mode", "declarative"}, "use --mode pairwise"},
		{[]string{"apply", "--generate", "3", "--backend", "nope"}, "want cilium, command, helm-values or simulated"},
		{[]string{"apply", "--generate", "3", "--backend", "helm-values"}, "--backend helm-values needs --clusters"},
		{[]string{"apply", "--generate", "3", "--backend", "simulated", "--mode", "x"}, `--mode "x"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			if _, err := runMesh(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestMeshApplyCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "connect.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$1 $2\" >> "+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"apply", "--generate", "4", "--backend", "command", "--command", script + " {a} {b}",
		"--journal", filepath.Join(dir, "journal"), "--log-dir", filepath.Join(dir, "logs")}
	out, err := runMesh(t, append(args, "--dry-run")...)
	if err != nil || !strings.Contains(out, "dry-run: the first command would be: [\""+script+"\" \"c1\" \"c4\"]") {
		t.Errorf("dry run: %v\n%s", err, out)
	}
	if _, err := os.Stat(calls); !os.IsNotExist(err) {
		t.Errorf("dry run ran the command: %v", err)
	}
	if out, err = runMesh(t, args...); err != nil || !strings.Contains(out, "circle  3/3     6           6") {
		t.Errorf("apply: %v\n%s", err, out)
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(got), "\n"); n != 6 {
		t.Errorf("%d commands ran, want 6:\n%s", n, got)
	}
	// The journal says all is done: a re-run runs nothing.
	if out, err = runMesh(t, args...); err != nil || !strings.Contains(out, "none    0/0     0 ") {
		t.Errorf("re-run: %v\n%s", err, out)
	}
}

func TestMeshStatusJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "clusters.yaml")
	if err := os.WriteFile(file, []byte("clusters:\n  - name: a\n    clustermeshAPIServer: 10.0.0.1:1\n  - name: b\n    clustermeshAPIServer: 10.0.0.2:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(dir, "values")
	if out, err := runMesh(t, "apply", "--clusters", file, "--backend", "helm-values", "--out", values); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(values, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	out, err := runMesh(t, "status", "--clusters", file, "--backend", "helm-values", "--out", values, "-o", "json")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	want := `[{"cluster":"a","configured":["b"]},{"cluster":"b","configured":[],"missing":["a"]}]` + "\n"
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("status -o json (-want +got):\n%s", diff)
	}
}

func TestMeshPlanScaleRules(t *testing.T) {
	t.Parallel()
	_, err := runMesh(t, "plan", "--generate", "300")
	if err == nil || !strings.Contains(err.Error(), "more than 255 clusters need maxConnectedClusters 511") || !strings.Contains(err.Error(), "--max-connected-clusters 511") {
		t.Errorf("300 generated clusters without 511: %v", err)
	}
	if _, err := runMesh(t, "plan", "--generate", "512", "--max-connected-clusters", "511"); err == nil || !strings.Contains(err.Error(), "at most 511 clusters") {
		t.Errorf("512 generated clusters: %v", err)
	}
	if _, err := runMesh(t, "plan", "--generate", "3", "--max-connected-clusters", "300"); err == nil || !strings.Contains(err.Error(), "Cilium accepts 255 or 511") {
		t.Errorf("--max-connected-clusters 300: %v", err)
	}
	out, err := runMesh(t, "plan", "--generate", "300", "--max-connected-clusters", "511", "--mode", "declarative", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Mode                              string
		RoundCount, WriteCount, PairCount int
		Writes                            []struct {
			Cluster string
			Peers   int
		}
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.Mode != "declarative" || p.RoundCount != 1 || p.WriteCount != 300 || p.PairCount != 44850 || len(p.Writes) != 300 || p.Writes[299].Peers != 299 {
		t.Errorf("declarative plan of 300: %+v", p)
	}
	out, err = runMesh(t, "plan", "--generate", "300", "--max-connected-clusters", "511", "--mode", "declarative")
	if err != nil || !strings.Contains(out, "clusters 300  writes 300  rounds 1  pairs 44850  method declarative") {
		t.Errorf("declarative table: %v\n%s", err, out)
	}

	// A clusters file of 300 clusters, one of them installed with the default 255.
	var file strings.Builder
	file.WriteString("clusters:\n")
	for i := 1; i <= 300; i++ {
		mc := 511
		if i == 17 {
			mc = 255
		}
		fmt.Fprintf(&file, "  - name: c%d\n    maxConnectedClusters: %d\n", i, mc)
	}
	path := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = runMesh(t, "plan", "--clusters", path)
	for _, want := range []string{"300 clusters need maxConnectedClusters: 511", "1 of them are recorded as installed without it (c17)", "clustermesh.maxConnectedClusters=511"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("clusters file with c17 at 255: error lacks %q: %v", want, err)
		}
	}
	if _, err := os.Stat(mesh.DefaultIDsPath(path)); !os.IsNotExist(err) {
		t.Errorf("a refused plan recorded ids: %v", err)
	}
	fixed := strings.Replace(file.String(), "c17\n    maxConnectedClusters: 255", "c17\n    maxConnectedClusters: 511", 1)
	if err := os.WriteFile(path, []byte(fixed), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runMesh(t, "plan", "--clusters", path, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ RoundCount int }
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.RoundCount != 299 {
		t.Errorf("300 clusters with 511: %d rounds (%v), want 299", s.RoundCount, err)
	}
}

// TestMeshPlanIDsStable: ids the clusters file leaves out are allocated once, recorded,
// and kept across re-plans that add and remove clusters; a removed cluster's id is not
// given to a newcomer.
func TestMeshPlanIDsStable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "clusters.yaml")
	plan := func(names ...string) (map[string]int, string) {
		t.Helper()
		var b strings.Builder
		b.WriteString("clusters:\n")
		for _, n := range names {
			b.WriteString("  - name: " + n + "\n    clustermeshAPIServer: " + n + ".example:32379\n")
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, err := runMeshStderr(t, "plan", "--clusters", path)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := mesh.LoadIDs(filepath.Join(dir, "clusters.ids.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return ids, stderr
	}
	ids, stderr := plan("a", "b", "c", "d")
	if diff := cmp.Diff(map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}, ids); diff != "" {
		t.Errorf("first plan (-want +got):\n%s", diff)
	}
	if !strings.Contains(stderr, "allocated cluster ids for a, b, c, d, recorded in "+filepath.Join(dir, "clusters.ids.yaml")) {
		t.Errorf("first plan does not report the allocation: %q", stderr)
	}
	// b leaves, e joins in front of the others: nobody moves, e does not get b's 2.
	ids, stderr = plan("e", "a", "c", "d")
	if diff := cmp.Diff(map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, ids); diff != "" {
		t.Errorf("after removing b and adding e (-want +got):\n%s", diff)
	}
	if !strings.Contains(stderr, "allocated cluster ids for e,") {
		t.Errorf("second plan: %q", stderr)
	}
	// b comes back: it gets its 2 again. Nothing new is allocated.
	ids, stderr = plan("a", "b", "c", "d", "e")
	if ids["b"] != 2 || len(ids) != 5 || stderr != "" {
		t.Errorf("b back: ids %v, stderr %q", ids, stderr)
	}
	// The clusters the CLI loads carry the recorded ids (helm-values writes them).
	values := filepath.Join(dir, "values")
	if out, err := runMesh(t, "apply", "--clusters", path, "--backend", "helm-values", "--out", values); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(values, "e.yaml"))
	if err != nil || !strings.Contains(string(got), "name: e\n  id: 5\n") {
		t.Errorf("e.yaml: %v\n%s", err, got)
	}
	// An explicit id that contradicts the record is refused.
	if err := os.WriteFile(path, []byte("clusters:\n  - name: a\n    id: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runMesh(t, "plan", "--clusters", path); err == nil || !strings.Contains(err.Error(), "id 7, but id 1 was allocated to it") {
		t.Errorf("contradicting explicit id: %v", err)
	}
}

// TestMeshApplyWaitsForStatus: with --status-command a join counts only once the
// command prints Cilium's status with every peer ready; the journal beside the clusters
// file lets a re-run skip the finished joins.
func TestMeshApplyWaitsForStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "clusters.yaml")
	if err := os.WriteFile(file, []byte("clusters:\n  - name: a\n    clustermeshAPIServer: a.example:2379\n  - name: b\n    clustermeshAPIServer: b.example:2379\n  - name: c\n    clustermeshAPIServer: c.example:2379\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Every cluster reports every cluster ready, except that b reports c not ready until
	// the marker file exists: b's join cannot finish before.
	marker := filepath.Join(dir, "c-up")
	script := filepath.Join(dir, "status.sh")
	body := `#!/bin/sh
c=true
if [ "$MESH_CLUSTER" = b ] && [ ! -e ` + marker + ` ]; then c=false; fi
echo '{"cluster-mesh": {"clusters": [{"name": "a", "ready": true}, {"name": "b", "ready": true}, {"name": "c", "ready": '$c', "status": "reconnecting"}]}}'
`
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(dir, "values")
	args := []string{"apply", "--clusters", file, "--backend", "helm-values", "--out", values,
		"--status-command", script + " {cluster}", "--poll", "1ms", "--join-timeout", "200ms", "--parallel", "2"}
	out, err := runMesh(t, args...)
	if err == nil || !strings.Contains(out, `join b after 1 attempts: cluster "b": not joined after 200ms (--join-timeout): c: agent 1: not ready (reconnecting)`) {
		t.Fatalf("b's join should time out waiting for c: %v\n%s", err, out)
	}
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runMesh(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"join b: 2 peers ready after", "joins: 0 written, 1 only awaited (written before), 2 skipped (done per the journal)"} {
		if !strings.Contains(out, want) {
			t.Errorf("resumed apply lacks %q:\n%s", want, out)
		}
	}
	entries, err := mesh.ReadJournal(filepath.Join(dir, "clusters.journal"))
	if err != nil {
		t.Fatal(err)
	}
	if got := mesh.MaxInFlight(entries); got > 2 {
		t.Errorf("%d joins in flight with --parallel 2", got)
	}
	if _, err := runMesh(t, "apply", "--generate", "3", "--backend", "simulated", "--mode", "pairwise", "--status-command", "x"); err == nil || !strings.Contains(err.Error(), "use --mode declarative") {
		t.Errorf("--status-command with pairwise: %v", err)
	}
}
