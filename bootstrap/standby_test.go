package bootstrap

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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
		for _, ph := range []string{"manifest", "plan", "install", "configure", "kubelet", "join", "podnetwork", "address", "standby"} {
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
		// Its provider logs in to resume it: there is no hook to install.
		{"ssh standby", sshStandbyInput(), "manifest plan install configure", `"result":"prepared"`},
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

// gceStandbyInput is a standby on a provider whose instance-id survives a
// stop (GCE): it gets the resume hook.
func gceStandbyInput() Input {
	in := validInput("gce")
	in.JoinToken = ""
	in.Options.Standby = true
	in.StandbyResume = ResumeByGCEMetadata
	return in
}

// sshStandbyInput is a standby whose provider resumes it over SSH (hcloud).
func sshStandbyInput() Input {
	in := standbyInput()
	in.Provider = "hcloud"
	in.StandbyResume = ResumeBySSH
	return in
}

// The hook is rendered only into a GCE standby's script; a docker standby's
// and every joining script have none, and asking for one outside a
// standby, or for an unknown mechanism, names the field.
func TestStandbyResumeHookIsRenderedOnlyWhereAsked(t *testing.T) {
	t.Parallel()
	render := func(in Input) string {
		t.Helper()
		ud, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		return string(ud.Script)
	}
	gce := render(gceStandbyInput())
	for _, want := range []string{"PREBAKE_STANDBY_RESUME='gce-metadata'", "put_file '" + StandbyResumeScriptPath + "' 0755 standby",
		"put_file '" + StandbyResumeUnitPath + "' 0644 standby", "ExecStart=" + StandbyResumeScriptPath} {
		if !strings.Contains(gce, want) {
			t.Errorf("a GCE standby's script lacks %q", want)
		}
	}
	// node.sh and the unit agree on its name.
	if !strings.Contains(nodeScript, "systemctl enable "+StandbyResumeUnit) {
		t.Errorf("node.sh does not enable %s", StandbyResumeUnit)
	}
	for name, in := range map[string]Input{"docker standby": standbyInput(), "gce node": validInput("gce")} {
		if s := render(in); !strings.Contains(s, "prebake_standby_files() {\n\t:\n}") || !strings.Contains(s, "PREBAKE_STANDBY_RESUME=''") {
			t.Errorf("%s: the script has a resume hook", name)
		}
	}
	if s := render(sshStandbyInput()); !strings.Contains(s, "prebake_standby_files() {\n\t:\n}") || !strings.Contains(s, "PREBAKE_STANDBY_RESUME='ssh'") {
		t.Errorf("an ssh standby's script has a resume hook, or does not say how it is resumed")
	}
	in := validInput("gce")
	in.StandbyResume = ResumeByGCEMetadata
	if _, err := Render(in); err == nil || !strings.Contains(err.Error(), `standbyResume "gce-metadata": only a warm-pool standby's user-data`) {
		t.Errorf("a hook on a joining node: %v", err)
	}
	in = validInput("hcloud")
	in.StandbyResume = ResumeBySSH
	if _, err := Render(in); err == nil || !strings.Contains(err.Error(), `standbyResume "ssh": only a warm-pool standby's user-data`) {
		t.Errorf("ssh resume on a joining node: %v", err)
	}
	in = gceStandbyInput()
	in.StandbyResume = "carrier-pigeon"
	if _, err := Render(in); err == nil || !strings.Contains(err.Error(), `standbyResume "carrier-pigeon": want "gce-metadata", "ssh" or empty`) {
		t.Errorf("an unknown mechanism: %v", err)
	}
}

// guestAttributes is a metadata server's guest-attributes endpoint: it
// keeps what the guest PUTs.
type guestAttributes struct {
	mu   sync.Mutex
	puts map[string][]string // path → bodies
}

func (g *guestAttributes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata-Flavor") != "Google" || r.Method != http.MethodPut {
		http.Error(w, "refused", http.StatusForbidden)
		return
	}
	b, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.puts == nil {
		g.puts = map[string][]string{}
	}
	g.puts[r.URL.Path] = append(g.puts[r.URL.Path], string(b))
}

func (g *guestAttributes) get(path string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.puts[path])
}

const standbyAttributePath = "/computeMetadata/v1/instance/guest-attributes/" + StandbyAttribute

// A GCE standby installs the hook (files, daemon-reload, enable, start
// without blocking), then writes its status, prepared, to the guest
// attribute; one that fails says so there too.
func TestGCEStandbyInstallsTheHookAndReports(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, extra, wantResult, wantRecord string
	}{
		{"prepared", "", `"result":"prepared"`,
			"systemctl daemon-reload\nsystemctl enable prebake-resume.service\nsystemctl start --no-block prebake-resume.service\n"},
		{"failed", "phase_configure() { fail 'broken on purpose'; }\n", `"result":"failed"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ga := &guestAttributes{}
			srv := httptest.NewServer(ga)
			t.Cleanup(srv.Close)
			dir := t.TempDir()
			in := gceStandbyInput()
			in.Options.RecordHostCommands = true
			root, record := filepath.Join(dir, "root"), filepath.Join(dir, "record")
			var b strings.Builder
			for _, ph := range []string{"manifest", "plan", "install", "configure"} {
				b.WriteString("phase_" + ph + "() { :; }\n")
			}
			// put_file under root, as it writes for real.
			b.WriteString(`put_file() { mkdir -p "$ROOT$(dirname "$1")"; printf '%s' "$4" >"$ROOT$1"; chmod "$2" "$ROOT$1"; CHANGED="$CHANGED $3"; CHANGED_FILES="$CHANGED_FILES $1"; }` + "\n")
			b.WriteString(tc.extra)
			b.WriteString("ROOT=" + shQuote(root) + "\nRECORD=" + shQuote(record) + "\nPREBAKE_METADATA_URL=" + shQuote(srv.URL) + "\n")
			b.WriteString("prebake_main\n")
			out, err := nodeFunctions(t, in, b.String())
			if (err != nil) != (tc.wantRecord == "") {
				t.Fatalf("prebake_main: %v\n%s", err, out)
			}
			puts := ga.get(standbyAttributePath)
			if len(puts) == 0 || !strings.Contains(puts[len(puts)-1], tc.wantResult) {
				t.Fatalf("guest attribute %s = %q, want the status with %s\n%s", StandbyAttribute, puts, tc.wantResult, out)
			}
			st, err := ParseStatus([]byte(puts[len(puts)-1]))
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := os.ReadFile(record)
			if string(rec) != tc.wantRecord {
				t.Errorf("host commands %q, want %q", rec, tc.wantRecord)
			}
			if tc.wantRecord == "" {
				return
			}
			if p, ok := st.Phase("standby"); !ok || p.Result != "ok" {
				t.Errorf("status phases %+v, want standby ok", st.Phases)
			}
			for path, mode := range map[string]os.FileMode{StandbyResumeScriptPath: 0o755, StandbyResumeUnitPath: 0o644} {
				fi, err := os.Stat(filepath.Join(root, path))
				if err != nil || fi.Mode().Perm() != mode {
					t.Errorf("%s: %v, mode %v, want %v", path, err, fi, mode)
				}
			}
			script, _ := os.ReadFile(filepath.Join(root, StandbyResumeScriptPath))
			if string(script) != standbyResumeScript {
				t.Errorf("the hook written differs from standby-resume.sh")
			}
		})
	}
}

// userDataServer is a metadata server's instance/attributes/user-data with
// wait_for_change: a request whose last_etag is the current ETag waits for
// a change or timeout_sec.
type userDataServer struct {
	mu      sync.Mutex
	value   string
	version int
	changed chan struct{} // closed and replaced on every change
	gets    int
}

func newUserDataServer(value string) *userDataServer {
	return &userDataServer{value: value, version: 1, changed: make(chan struct{})}
}

func (u *userDataServer) set(value string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.value = value
	u.version++
	close(u.changed)
	u.changed = make(chan struct{})
}

func (u *userDataServer) requests() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.gets
}

func (u *userDataServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata-Flavor") != "Google" || r.URL.Path != "/computeMetadata/v1/instance/attributes/user-data" {
		http.Error(w, "refused", http.StatusForbidden)
		return
	}
	u.mu.Lock()
	u.gets++
	etag, changed := fmt.Sprintf("v%d", u.version), u.changed
	u.mu.Unlock()
	q := r.URL.Query()
	if q.Get("wait_for_change") == "true" && q.Get("last_etag") == etag {
		secs, _ := strconv.Atoi(q.Get("timeout_sec"))
		select {
		case <-changed:
		case <-time.After(time.Duration(secs) * time.Second):
		case <-r.Context().Done():
			return
		}
	}
	u.mu.Lock()
	etag, value := fmt.Sprintf("v%d", u.version), u.value
	u.mu.Unlock()
	w.Header().Set("ETag", etag)
	_, _ = io.WriteString(w, value)
}

// The hook leaves a standby alone while its user-data is its own
// (prepare-only), or not a cloud-config; the first user-data that joins has
// its node script written (0700) and run, once; from then on the hook
// exits at once without asking the metadata server.
func TestStandbyResumeHookRunsTheJoinOnce(t *testing.T) {
	t.Parallel()
	standby, err := Render(gceStandbyInput())
	if err != nil {
		t.Fatal(err)
	}
	join, err := Render(validInput("gce"))
	if err != nil {
		t.Fatal(err)
	}
	uds := newUserDataServer(string(standby.CloudConfig))
	srv := httptest.NewServer(uds)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	hook := filepath.Join(dir, "standby-resume")
	if err := os.WriteFile(hook, []byte(standbyResumeScript), 0o755); err != nil {
		t.Fatal(err)
	}
	// What runs the script records that it ran, and with which script.
	runner := filepath.Join(dir, "runner")
	if err := os.WriteFile(runner, []byte("#!/bin/sh\ncp \"$1\" "+shQuote(filepath.Join(dir, "ran"))+"\necho run >>"+shQuote(filepath.Join(dir, "runs"))+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, taken := filepath.Join(dir, "bootstrap.sh"), filepath.Join(dir, "taken")
	run := func() *exec.Cmd {
		cmd := exec.Command("sh", hook)
		cmd.Env = append(os.Environ(), "PREBAKE_METADATA_URL="+srv.URL, "PREBAKE_RESUME_SCRIPT="+script,
			"PREBAKE_RESUME_TAKEN="+taken, "PREBAKE_RESUME_RUN="+runner, "PREBAKE_RESUME_WAIT=1")
		return cmd
	}
	cmd := run()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// It read its own user-data and waits on it: nothing ran.
	eventually(t, "the hook to read the user-data twice", func() bool { return uds.requests() >= 2 })
	select {
	case err := <-done:
		t.Fatalf("the hook ended on a standby's own user-data: %v\n%s", err, out.String())
	default:
	}
	uds.set("#!/bin/sh\necho not a cloud-config\n")
	n := uds.requests()
	eventually(t, "the hook to read the next user-data", func() bool { return uds.requests() >= n+2 })
	if _, err := os.Stat(filepath.Join(dir, "runs")); err == nil {
		t.Fatal("the hook ran something for a user-data that is not a cloud-config")
	}
	uds.set(string(join.CloudConfig))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the hook: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the hook did not run the joining script\n%s", out.String())
	}
	ran, _ := os.ReadFile(filepath.Join(dir, "ran"))
	if string(ran) != string(join.Script) {
		t.Errorf("the script run is not the joining user-data's node script (%d bytes, want %d)", len(ran), len(join.Script))
	}
	if fi, err := os.Stat(script); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("script at %s: %v %v, want mode 0700", script, err, fi)
	}
	if strings.Contains(out.String(), testToken) {
		t.Error("the hook printed the join token")
	}
	// Taken: the next boot's hook ends at once.
	before := uds.requests()
	if out, err := run().CombinedOutput(); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	runs, _ := os.ReadFile(filepath.Join(dir, "runs"))
	if uds.requests() != before || string(runs) != "run\n" {
		t.Errorf("after the join the hook asked %d more times and ran %q, want none and one run", uds.requests()-before, runs)
	}
}

// eventually polls cond every 10ms for up to 30s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// NodeScript gives back the very script Render put in the cloud-config, for
// a provider that runs it over SSH; anything else is refused without
// quoting the user-data.
func TestNodeScriptOfACloudConfig(t *testing.T) {
	t.Parallel()
	ud, err := Render(validInput("hcloud"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := NodeScript(ud.CloudConfig)
	if err != nil || string(got) != string(ud.Script) {
		t.Fatalf("NodeScript of a rendered cloud-config = %d bytes, %v; want the %d-byte script", len(got), err, len(ud.Script))
	}
	for _, tc := range []struct{ name, in, want string }{
		{"a shell script", string(ud.Script), "is no #cloud-config"},
		{"no node script", "#cloud-config\nruncmd: [[sh, -c, 'echo " + testToken + "']]\n", "writes no node script to " + ScriptPath},
		{"another file", "#cloud-config\nwrite_files: [{path: /etc/motd, content: " + testToken + "}]\n", "writes no node script"},
		{"bad YAML", "#cloud-config\nwrite_files: {path: " + testToken + "\n", "no valid cloud-config YAML"},
	} {
		_, err := NodeScript([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), testToken) {
			t.Errorf("%s: NodeScript = %v, want an error with %q and no token", tc.name, err, tc.want)
		}
	}
}
