package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runTimeline(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newTimelineCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestTimelineFlags(t *testing.T) {
	t.Parallel()
	if _, _, err := runTimeline(t, "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "--output yaml: want table, json or markdown") {
		t.Errorf("-o yaml: %v", err)
	}
	if _, _, err := runTimeline(t, "--since", "-1h"); err == nil || !strings.Contains(err.Error(), "--since") {
		t.Errorf("--since -1h: %v", err)
	}
}

// An API server that forbids listing Nodes: the command says which verb on which resource
// to grant, after its progress on stderr.
func TestTimelineNamesTheMissingRBAC(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,`+
			`"message":"nodes is forbidden: User \"dev\" cannot list resource \"nodes\" in API group \"\" at the cluster scope",`+
			`"details":{"kind":"nodes"}}`)
	}))
	defer api.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %s}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, api.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runTimeline(t, "--kubeconfig", kc)
	if err == nil || !strings.Contains(err.Error(), `grant the kubeconfig's user the verb "list" on "nodes"`) {
		t.Fatalf("err = %v, want the verb and resource to grant", err)
	}
	if !strings.Contains(stderr, "prebake timeline: listing Nodes") || stdout != "" {
		t.Errorf("stderr %q, stdout %q: want progress on stderr and no report", stderr, stdout)
	}
}
