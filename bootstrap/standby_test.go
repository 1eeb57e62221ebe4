package bootstrap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// standbyInput is validInput as a warm-pool standby renders it: no token.
func standbyInput() Input {
	in := validInput("docker")
	in.JoinToken = ""
	in.Options.Standby = true
	return in
}

func TestStandbyUserDataHoldsNoJoin(t *testing.T) {
	t.Parallel()
	ud, err := Render(standbyInput())
	if err != nil {
		t.Fatal(err)
	}
	script := string(ud.Script)
	// What is rendered for this node (node.sh itself is the same for all).
	prelude, ok := strings.CutSuffix(script, nodeScript)
	if !ok {
		t.Fatal("the script does not end with node.sh")
	}
	for _, absent := range []string{"kubeadm-join.yaml", "JoinConfiguration", "token:", "It holds a join token"} {
		if strings.Contains(prelude, absent) {
			t.Errorf("a standby's user-data contains %q", absent)
		}
	}
	if !strings.Contains(script, "PREBAKE_STANDBY='1'") || !strings.Contains(script, "It holds no secret") {
		t.Errorf("a standby's script does not say it is one:\n%.600s", script)
	}

	// A token in a standby's input is refused, without showing it.
	in := standbyInput()
	in.JoinToken = testToken
	_, err = Render(in)
	if err == nil || !strings.Contains(err.Error(), "joinToken: a standby's user-data (options.standby) holds no join token") || strings.Contains(err.Error(), testToken) {
		t.Errorf("standby with a token: %v", err)
	}
	// A node that joins still needs one.
	in = validInput("docker")
	in.JoinToken = ""
	if _, err := Render(in); err == nil || !strings.Contains(err.Error(), "joinToken:") {
		t.Errorf("node without a token: %v", err)
	}
}

// TestStandbyStopsBeforeTheJoin runs prebake_main with every phase stubbed
// (each records its name): a standby runs up to configure and reports
// prepared; the same machine's second run (the user-data it gets when
// taken) runs on to the join.
func TestStandbyStopsBeforeTheJoin(t *testing.T) {
	t.Parallel()
	stubs := func(dir string) string {
		rec := shQuote(filepath.Join(dir, "ran"))
		var b strings.Builder
		for _, ph := range []string{"manifest", "plan", "install", "configure", "kubelet", "join", "podnetwork", "address"} {
			b.WriteString("phase_" + ph + "() { echo " + ph + " >>" + rec + "; }\n")
		}
		b.WriteString("annotate_node() { :; }\nprebake_main\ncat \"$PREBAKE_STATUS\"\n")
		return b.String()
	}
	for _, tc := range []struct {
		name       string
		in         Input
		wantRan    string
		wantResult string
	}{
		{"standby", standbyInput(), "manifest plan install configure", `"result":"prepared"`},
		{"taken", validInput("docker"), "manifest plan install configure kubelet join", `"result":"ok"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			out, err := nodeFunctions(t, tc.in, stubs(dir))
			if err != nil {
				t.Fatalf("prebake_main: %v\n%s", err, out)
			}
			ran, _ := os.ReadFile(filepath.Join(dir, "ran"))
			if got := strings.Join(strings.Fields(string(ran)), " "); got != tc.wantRan {
				t.Errorf("phases run = %q, want %q", got, tc.wantRan)
			}
			if !strings.Contains(out, tc.wantResult) {
				t.Errorf("status = %s, want %s", out, tc.wantResult)
			}
			if _, err := ParseStatus([]byte(out[strings.Index(out, "{"):])); err != nil {
				t.Errorf("status does not parse: %v", err)
			}
		})
	}
}

func TestIgnitionRefusesAStandby(t *testing.T) {
	t.Parallel()
	in := validIgnition(Flatcar, "gce")
	in.JoinToken = ""
	in.Options.Standby = true
	_, err := RenderIgnition(in)
	if err == nil || !strings.Contains(err.Error(), "options.standby: Ignition runs only at an image's first boot") {
		t.Errorf("RenderIgnition of a standby: %v", err)
	}
}
