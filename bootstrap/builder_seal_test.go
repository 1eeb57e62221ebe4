package bootstrap

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sealScript writes the builder script with its paths moved into dir and its cleanup and
// report steps replaced by stand-ins (the real ones change this host's /etc; the sandboxed
// build runs them in a Debian root), so the seal logic itself runs here: when it waits, when
// it goes ahead, and what it prints.
func sealScript(t *testing.T, dir string) string {
	t.Helper()
	ud, err := RenderBuilder(validBuilderInput())
	if err != nil {
		t.Fatal(err)
	}
	head, tail, ok := strings.Cut(string(ud.Script), "\ntrap - EXIT\ncase ")
	if !ok {
		t.Fatal("builder script has no step dispatch")
	}
	overrides := "\nPREBAKE_STATUS=" + shQuote(filepath.Join(dir, "status.json")) +
		"\nBUILD_REPORT=" + shQuote(filepath.Join(dir, "report.json")) +
		"\nCLOUD_BOOT_FINISHED=" + shQuote(filepath.Join(dir, "boot-finished")) +
		"\nSEAL_REPORT_OUT=" + shQuote(filepath.Join(dir, "sealed.json")) +
		"\nSEAL_LOG=" + shQuote(filepath.Join(dir, "seal.log")) +
		"\nSEAL_WAIT_TRIES=300\n" +
		"builder_cleanup() { echo cleaned >>" + shQuote(filepath.Join(dir, "steps")) + "; }\n" +
		"builder_report() { echo reported >>" + shQuote(filepath.Join(dir, "steps")) +
		"; printf '{\"status\":\"done\",\"observed\":{},\"hygiene\":{}}\\n' >\"$BUILD_REPORT\"; echo 'report written'; }\n"
	path := filepath.Join(dir, "builder.sh")
	if err := os.WriteFile(path, []byte(head+overrides+"\ntrap - EXIT\ncase "+tail), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBuilderSealWaitsForInstallAndCloudInit: seal says "not yet" (SealNotYet) until the
// install step has a result and cloud-init's final stage wrote boot-finished; then it cleans,
// reports, and prints the report and nothing else on stdout.
func TestBuilderSealWaitsForInstallAndCloudInit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := sealScript(t, dir)
	seal := func() (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command("sh", script, "seal")
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}
	status := func(result string) string {
		return `{"version":1,"provider":"hcloud","node":"prebake-builder","result":"` + result + `","prebaked":false,"installed":[],"alreadyPresent":[],"totalMs":1,"phases":[{"name":"install","ms":1,"result":"ok","detail":""}],"error":""}`
	}
	steps := func() string { b, _ := os.ReadFile(filepath.Join(dir, "steps")); return string(b) }

	for _, tc := range []struct {
		name, status string
		finished     bool
		want         string
	}{
		{name: "no status file", want: "no status file"},
		{name: "install running", status: status("running"), finished: true, want: "no result (running)"},
		{name: "cloud-init not done", status: status("ok"), want: "final stage has not finished"},
	} {
		os.Remove(filepath.Join(dir, "status.json"))
		os.Remove(filepath.Join(dir, "boot-finished"))
		if tc.status != "" {
			writeTestFile(t, filepath.Join(dir, "status.json"), tc.status)
		}
		if tc.finished {
			writeTestFile(t, filepath.Join(dir, "boot-finished"), "")
		}
		out, errOut, code := seal()
		if code != SealNotYet || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: seal = exit %d, stdout %q, stderr %q; want exit %d, no stdout, stderr naming %q", tc.name, code, out, errOut, SealNotYet, tc.want)
		}
		if s := steps(); s != "" {
			t.Fatalf("%s: seal ran %q before the builder was done", tc.name, s)
		}
	}
	// A failed install is sealed too: the report then says failed.
	for _, result := range []string{"failed", "ok"} {
		os.Remove(filepath.Join(dir, "steps"))
		writeTestFile(t, filepath.Join(dir, "status.json"), status(result))
		writeTestFile(t, filepath.Join(dir, "boot-finished"), "")
		out, errOut, code := seal()
		if code != 0 {
			t.Fatalf("install %s, cloud-init done: seal exit %d: %s", result, code, errOut)
		}
		if want := `{"status":"done","observed":{},"hygiene":{}}` + "\n"; out != want {
			t.Errorf("install %s: seal's stdout %q, want only the report %q (the steps' own output goes to stderr)", result, out, want)
		}
		if s := steps(); s != "cleaned\nreported\n" {
			t.Errorf("install %s: seal ran %q, want cleanup then report", result, s)
		}
	}
}

// TestBuilderSealLaterPutsGuestAttribute: seal-later returns at once (cloud-init must go on
// to finish), and its waiter PUTs the report to the guest attribute, with the metadata
// server's header, only once cloud-init is done.
func TestBuilderSealLaterPutsGuestAttribute(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is missing (the GCE builder's waiter PUTs with it)")
		}
		t.Skip("curl is missing")
	}
	type put struct{ method, path, flavor, body string }
	puts := make(chan put, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		puts <- put{r.Method, r.URL.Path, r.Header.Get("Metadata-Flavor"), string(body)}
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	script := sealScript(t, dir)
	writeTestFile(t, filepath.Join(dir, "status.json"), `{"version":1,"provider":"gce","node":"prebake-builder","result":"ok","installed":[],"phases":[]}`)

	cmd := exec.Command("sh", script, "seal-later", ReportToGCEGuestAttribute)
	cmd.Env = append(os.Environ(), "PREBAKE_METADATA_URL="+srv.URL)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "seal-wait gce-guest-attributes started") {
		t.Fatalf("seal-later: %v\n%s", err, out)
	}
	// The waiter is running and cloud-init is not done. Once it has asked seal at least once
	// (each try writes its output file), it must not have sealed or put anything.
	tried := filepath.Join(dir, "sealed.json.tmp")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(tried); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "seal.log"))
			t.Fatalf("the waiter never asked seal within 30 s; its log:\n%s", log)
		}
	}
	select {
	case p := <-puts:
		t.Fatalf("the waiter put %+v before cloud-init was done", p)
	default:
	}
	if _, err := os.Stat(filepath.Join(dir, "steps")); err == nil {
		t.Fatal("the waiter sealed before cloud-init was done")
	}
	writeTestFile(t, filepath.Join(dir, "boot-finished"), "")
	select {
	case p := <-puts:
		want := put{http.MethodPut, "/computeMetadata/v1/instance/guest-attributes/" + GCEReportAttribute, "Google", `{"status":"done","observed":{},"hygiene":{}}` + "\n"}
		if p != want {
			t.Errorf("waiter's request %+v, want %+v", p, want)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the waiter put no report within 60 s of boot-finished")
	}

	bad := exec.Command("sh", script, "seal-later", "labels")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown report transport 'labels'") {
		t.Errorf("seal-later labels = %v, %s; want a refusal naming the transport", err, out)
	}
}

// TestBuilderSealLaterLeavesFile: with the file transport (docker) the waiter seals once
// cloud-init is done and leaves the report at BUILD_REPORT, where the provider reads it out of
// the container; before that there is none.
func TestBuilderSealLaterLeavesFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := sealScript(t, dir)
	writeTestFile(t, filepath.Join(dir, "status.json"), `{"version":1,"provider":"docker","node":"prebake-builder","result":"ok","installed":[],"phases":[]}`)
	out, err := exec.Command("sh", script, "seal-later", ReportToFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "seal-wait file started") {
		t.Fatalf("seal-later file: %v\n%s", err, out)
	}
	report := filepath.Join(dir, "report.json")
	tried := filepath.Join(dir, "sealed.json.tmp")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(tried); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "seal.log"))
			t.Fatalf("the waiter never asked seal within 30 s; its log:\n%s", log)
		}
	}
	if _, err := os.Stat(report); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a report exists before cloud-init was done (stat: %v)", err)
	}
	writeTestFile(t, filepath.Join(dir, "boot-finished"), "")
	sealed := filepath.Join(dir, "sealed.json")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(sealed); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "seal.log"))
			t.Fatalf("the waiter did not seal within 60 s of boot-finished; its log:\n%s", log)
		}
	}
	got, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"status":"done","observed":{},"hygiene":{}}` + "\n"; string(got) != want {
		t.Errorf("report %q, want %q", got, want)
	}
	if s, _ := os.ReadFile(filepath.Join(dir, "steps")); string(s) != "cleaned\nreported\n" {
		t.Errorf("the waiter ran %q, want cleanup then report", s)
	}
}
