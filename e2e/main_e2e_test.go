//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prebake-dev/prebake/e2e/serveproc"
	"github.com/prebake-dev/prebake/e2e/timeline"
	"github.com/prebake-dev/prebake/internal/kubetest"
)

// suite is what TestMain sets up once for every scenario: one control plane and one prebake
// binary. err is why they could not be set up; each test reports it (skip, or fail under
// CI=true) through kubetest.SkipIfUnavailable.
var suite struct {
	err     error
	backend kubetest.Backend
	rest    *rest.Config
	kube    kubernetes.Interface
	prebake string // the built binary
	report  *timeline.Report
}

// outDir is where the timeline report goes: e2e/out (tests run in the package directory).
const outDir = "out"

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) (code int) {
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
	}
	suite.report = &timeline.Report{Backend: kubetest.BackendName(), Started: time.Now()}
	dir, err := os.MkdirTemp("", "prebake-e2e-")
	if err != nil {
		progress("temp dir: %v", err)
		return 1
	}
	defer func() {
		if code == 0 {
			os.RemoveAll(dir)
		} else {
			progress("kept logs in %s", dir)
		}
	}()

	// The first build of the control plane takes 5–20 min; starting takes seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	began := time.Now()
	suite.err = setupSuite(ctx, dir, progress)
	if suite.err == nil {
		progress("cluster (%s) and prebake ready in %.1fs", kubetest.BackendName(), time.Since(began).Seconds())
		defer func() {
			if err := suite.backend.Stop(context.Background()); err != nil {
				progress("stop cluster: %v", err)
			}
		}()
	}

	code = m.Run()

	if suite.report.Len() > 0 {
		if err := suite.report.Write(outDir); err != nil {
			progress("write timeline report: %v", err)
			return 1
		}
		abs, _ := filepath.Abs(outDir)
		progress("timeline report written to %s/timeline.md and timeline.json", abs)
	}
	return code
}

func setupSuite(ctx context.Context, dir string, progress func(string, ...any)) error {
	moduleDir, err := serveproc.ModuleDir(ctx)
	if err != nil {
		return err
	}
	progress("building prebake")
	if suite.prebake, err = serveproc.Build(ctx, moduleDir, dir); err != nil {
		return err
	}
	progress("preparing the %s cluster backend", kubetest.BackendName())
	b, err := kubetest.NewBackend(ctx, "", kubetest.Options{Dir: filepath.Join(dir, "cluster"), Out: progressWriter(progress)})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	suite.backend = b
	// The Node CA would run on. Without any Node, kube-scheduler retries a pending pod
	// only when its backoff runs out, up to 11 s after the first Node turns Ready
	// (docs/performance.md, "Node Ready → pod Running").
	if err := kubetest.AddSystemNode(ctx, b); err != nil {
		return err
	}
	if suite.rest, err = b.RESTConfig(); err != nil {
		return err
	}
	// client-go's default 5 QPS would make creating 200 pods take 40 s.
	suite.rest.QPS, suite.rest.Burst = 200, 400
	suite.kube, err = kubernetes.NewForConfig(suite.rest)
	return err
}

type progressWriter func(string, ...any)

func (p progressWriter) Write(b []byte) (int, error) {
	p("%s", trimNewline(string(b)))
	return len(b), nil
}

func trimNewline(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}
