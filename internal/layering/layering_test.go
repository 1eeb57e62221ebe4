package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/prebake-dev/prebake"

// leaves are the packages internal/ may import besides its own: they import
// no project package above them.
var leaves = []string{"bootstrap", "imagecatalog", "mesh"}

type pkg struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
}

// rel is path relative to the module ("" for none of ours).
func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

func under(r, dir string) bool { return r == dir || strings.HasPrefix(r, dir+"/") }

// isLeaf reports whether r is one of the leaves or below one.
func isLeaf(r string) bool {
	return slices.ContainsFunc(leaves, func(l string) bool { return under(r, l) })
}

// violations lists every import that breaks a rule of the package doc.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		me, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		if slices.Contains(p.Imports, "testing") {
			out = append(out, fmt.Sprintf("%s imports testing outside its tests: take internal/tb.TB", me))
		}
		all := slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		for _, imp := range slices.Compact(slices.Sorted(slices.Values(all))) {
			dep, ours := rel(imp)
			if !ours || dep == me {
				continue
			}
			switch {
			case isLeaf(me) && slices.Contains(p.Imports, imp) && !under(dep, "internal") && !isLeaf(dep):
				out = append(out, fmt.Sprintf("%s imports %s: the leaves %s import, outside their tests, only internal/ and each other", me, dep, strings.Join(leaves, ", ")))
			case under(dep, "e2e") && !under(me, "e2e") && !under(me, "cmd"):
				out = append(out, fmt.Sprintf("%s imports %s: only cmd/ and e2e/ may import e2e/", me, dep))
			case under(dep, "cmd") && !under(me, "cmd"):
				out = append(out, fmt.Sprintf("%s imports %s: nothing outside cmd/ imports cmd/", me, dep))
			case under(me, "internal") && !under(dep, "internal") && !isLeaf(dep):
				out = append(out, fmt.Sprintf("%s imports %s: internal/ holds leaves, which import only internal/ and %s", me, dep, strings.Join(leaves, ", ")))
			}
		}
	}
	return out
}

func TestViolationsCatchesEachRule(t *testing.T) {
	t.Parallel()
	bad := []pkg{
		{ImportPath: module + "/providers/static/statictest", Imports: []string{module + "/e2e/cluster"}},
		{ImportPath: module + "/autoscaling", Imports: []string{module + "/cmd/prebake/app"}},
		{ImportPath: module + "/internal/kubetest/registry", Imports: []string{"testing"}},
		{ImportPath: module + "/internal/kubetest", TestImports: []string{module + "/providers/kwok"}},
		{ImportPath: module + "/bootstrap/rootfstest", Imports: []string{module + "/providers"}},
	}
	got := violations(bad)
	for _, want := range []string{"only cmd/ and e2e/ may import e2e/", "nothing outside cmd/ imports cmd/", "imports testing outside its tests", "internal/ holds leaves",
		"bootstrap/rootfstest imports providers: the leaves"} {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, want) }) {
			t.Errorf("no violation %q in %q", want, got)
		}
	}
	good := []pkg{
		{ImportPath: module + "/e2e/demo", Imports: []string{module + "/internal/kubetest", module + "/e2e/standin"}},
		{ImportPath: module + "/cmd/prebake", Imports: []string{module + "/cmd/prebake/app"}},
		{ImportPath: module + "/internal/kubetest", Imports: []string{module + "/internal/tb", module + "/bootstrap"}, TestImports: []string{"testing"}},
		// A leaf's tests may drive it through the providers (imagecatalog's do); a leaf may
		// take internal/ and the other leaves.
		{ImportPath: module + "/imagecatalog", XTestImports: []string{module + "/providers/hcloud", module + "/imagecatalog"}},
		{ImportPath: module + "/bootstrap/rootfstest", Imports: []string{module + "/bootstrap", module + "/internal/kubetest", module + "/internal/tb"}},
		{ImportPath: module + "/mesh/cmd/bench", Imports: []string{module + "/mesh"}},
	}
	if v := violations(good); len(v) != 0 {
		t.Errorf("violations in a good layout: %q", v)
	}
}

// TestLayering holds this module to the rules, under every build tag its
// tests use.
func TestLayering(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-tags", "e2e,system", "-json", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: not this module's tree", len(pkgs))
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}
