//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/e2e/timeline"
)

// One world per test process: the control plane, file server, registry and base image are
// shared by the scenarios (each has its own cluster name, so its own containers, volumes and
// zone network), and the prebaked image is built once, by the first scenario that needs it.
var (
	worldOnce sync.Once
	theWorld  *World
	worldErr  error
	worldDir  string

	prebakedOnce sync.Once
	thePrebaked  Prebaked
	prebakedErr  error

	// report collects the phase tables, printed at the end of the run.
	reportMu sync.Mutex
	report   []string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if theWorld != nil {
		name := theWorld.Name
		c, err := newClient()
		if err := theWorld.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "realnode: close the world: %v\n", err)
			code = 1
		}
		// Nothing of the world may be left in the engine.
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			left, lerr := Leftovers(ctx, c, name)
			cancel()
			c.Close()
			if lerr != nil || len(left) > 0 {
				fmt.Fprintf(os.Stderr, "realnode: the engine still holds what world %s made (%v): %v\n", name, lerr, left)
				code = 1
			}
		}
	}
	if worldDir != "" {
		os.RemoveAll(worldDir)
	}
	reportMu.Lock()
	for _, r := range report {
		fmt.Fprintln(os.Stdout, r)
	}
	reportMu.Unlock()
	os.Exit(code)
}

// needWorld returns the world, starting it on first use; a missing prerequisite skips t
// with one line (fails it under CI=true).
func needWorld(t *testing.T) *World {
	t.Helper()
	worldOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
		defer cancel()
		worldDir, worldErr = os.MkdirTemp("", "prebake-realnode-")
		if worldErr != nil {
			return
		}
		theWorld, worldErr = Start(ctx, Options{Out: progress{}, Dir: worldDir})
	})
	if worldErr != nil {
		missingPrereq(t, worldErr)
	}
	return theWorld
}

// needPrebaked returns the prebaked image, building it on first use.
func needPrebaked(t *testing.T, w *World) Prebaked {
	t.Helper()
	prebakedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
		defer cancel()
		thePrebaked, prebakedErr = w.BuildPrebaked(ctx, BuildSpec{})
	})
	if prebakedErr != nil {
		t.Fatalf("build the prebaked image: %v", prebakedErr)
	}
	return thePrebaked
}

// missingPrereq skips t with one line, or fails it under CI=true, where a skipped real-node
// test would hide a broken runner. Any other error fails t.
func missingPrereq(t *testing.T, err error) {
	t.Helper()
	switch {
	case !isPrereq(err):
		t.Fatal(err)
	case os.Getenv("CI") == "true":
		t.Fatalf("real-node test prerequisite missing under CI=true: %v", err)
	default:
		t.Skipf("skipping real-node test: %v", firstLine(err.Error()))
	}
}

func isPrereq(err error) bool {
	for e := err; e != nil; {
		if e == ErrPrerequisite {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}

// progress shows the world's progress as it happens (go test -v prints t.Log only when a
// test ends; the world outlives tests).
type progress struct{}

func (progress) Write(p []byte) (int, error) {
	return os.Stderr.Write(p)
}

func addReport(c timeline.Comparison) { addReportText(c.Markdown()) }

func addReportText(s string) {
	reportMu.Lock()
	defer reportMu.Unlock()
	report = append(report, s)
}

func tempFile(t *testing.T, name string) string { return filepath.Join(t.TempDir(), name) }
