package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/prebake-dev/prebake/imagecatalog"
)

func runImages(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newImagesCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// imagesCatalog writes a catalog with verified images A-E (hcloud, global)
// and returns its path.
func imagesCatalog(t *testing.T, extra ...imagecatalog.Image) string {
	t.Helper()
	versions := map[string]string{}
	for _, c := range imagecatalog.DefaultComponents {
		versions[c] = "1.0.0-1"
	}
	var c imagecatalog.Catalog
	t0 := time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC)
	for i, id := range []string{"A", "B", "C", "D", "E"} {
		built := t0.Add(time.Duration(i) * time.Hour)
		im := imagecatalog.Image{
			ID: id, Provider: "hcloud", Created: built, InputsHash: fmt.Sprintf("%032x", i),
			Name:     imagecatalog.Name{OS: "ubuntu", OSVersion: "2404", K8s: imagecatalog.Version{Major: 1, Minor: 34, Patch: 2}, Arch: "amd64", Built: built}.String(),
			Manifest: imagecatalog.DefaultManifest(versions), Verified: &imagecatalog.Event{At: built},
		}
		var err error
		if c, err = imagecatalog.Publish(c, im); err != nil {
			t.Fatal(err)
		}
	}
	for _, im := range extra {
		var err error
		if c, err = imagecatalog.Publish(c, im); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "images.yaml")
	if _, err := (imagecatalog.FileStore{Path: path}).Save(context.Background(), c, imagecatalog.Revision{}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestImagesAcceptanceScenario(t *testing.T) {
	t.Parallel()
	cat := imagesCatalog(t)
	steps := [][]string{
		{"promote", "A"}, {"promote", "B"}, {"promote", "C"},
		{"rollback", "--reason", "C fails canary join"},
		{"promote", "D", "--channel", "candidate"},
	}
	for _, s := range steps {
		if out, err := runImages(t, append(s, "--catalog", cat)...); err != nil {
			t.Fatalf("%v: %v\n%s", s, err, out)
		}
	}
	for _, tt := range []struct {
		inUse          string
		keep, toDelete []string
	}{
		{"", []string{"A", "B", "D"}, []string{"C", "E"}},
		{"C", []string{"A", "B", "C", "D"}, []string{"E"}},
	} {
		out, err := runImages(t, "gc", "--dry-run", "--keep-history", "1", "--in-use", tt.inUse, "--catalog", cat, "-o", "json")
		if err != nil {
			t.Fatalf("gc: %v\n%s", err, out)
		}
		var plan imagecatalog.GCPlan
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatalf("gc -o json: %v\n%s", err, out)
		}
		var kept []string
		for _, k := range plan.Keep {
			kept = append(kept, k.ID)
		}
		if d := cmp.Diff(tt.keep, kept); d != "" {
			t.Errorf("in use %q: keep (-want +got):\n%s", tt.inUse, d)
		}
		if d := cmp.Diff(tt.toDelete, plan.Delete); d != "" {
			t.Errorf("in use %q: delete (-want +got):\n%s", tt.inUse, d)
		}
	}
	out, err := runImages(t, "resolve", "--catalog", cat)
	if err != nil || out != "B\n" {
		t.Errorf("resolve stable = %q, %v; want B", out, err)
	}
	out, err = runImages(t, "list", "--catalog", cat)
	if err != nil || !strings.Contains(out, "\nA ") || !regexpMatch(`\nA .* stable~1\n`, out) || !regexpMatch(`\nB .* stable\n`, out) || !regexpMatch(`\nD .* candidate\n`, out) {
		t.Errorf("list: %v\n%s", err, out)
	}
	if _, err := runImages(t, "gc", "--catalog", cat); err == nil || !strings.Contains(err.Error(), "--dry-run") {
		t.Errorf("gc without --dry-run = %v, want an error saying only --dry-run works", err)
	}
}

func TestImagesResolveAmbiguous(t *testing.T) {
	t.Parallel()
	fsn := imagecatalog.Image{
		ID: "F", Provider: "hcloud", Location: "fsn1", InputsHash: strings.Repeat("f", imagecatalog.InputsHashLen),
		Name: "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261201t0904", Verified: &imagecatalog.Event{},
	}
	fsn.Manifest = imagecatalog.DefaultManifest(map[string]string{})
	for k := range fsn.Manifest.Components {
		fsn.Manifest.Components[k] = "1.0.0-1"
	}
	cat := imagesCatalog(t, fsn)
	for _, id := range []string{"B", "F"} {
		if out, err := runImages(t, "promote", id, "--catalog", cat); err != nil {
			t.Fatalf("promote %s: %v\n%s", id, err, out)
		}
	}
	_, err := runImages(t, "resolve", "--catalog", cat, "--os", "ubuntu-2404", "--arch", "amd64")
	if err == nil || !strings.Contains(err.Error(), "ambiguous") ||
		!strings.Contains(err.Error(), "B (prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1604)") ||
		!strings.Contains(err.Error(), "F (prebake-ubuntu-2404-k8s-1-34-2-amd64-20261201t0904)") {
		t.Errorf("resolve without a location = %v, want an ambiguity naming B and F", err)
	}
	out, err := runImages(t, "resolve", "--catalog", cat, "--location", "fsn1", "-o", "yaml")
	var res struct{ Image, Name string }
	if err != nil || yaml.Unmarshal([]byte(out), &res) != nil || res.Image != "F" {
		t.Errorf("resolve --location fsn1 -o yaml = %q, %v; want image F", out, err)
	}
	out, err = runImages(t, "resolve", "--catalog", cat, "--location", "")
	if err != nil || out != "B\n" {
		t.Errorf(`resolve --location "" = %q, %v; want B (the global image)`, out, err)
	}
	if _, err := runImages(t, "rollback", "--catalog", cat, "--reason", "x"); err == nil || !strings.Contains(err.Error(), "2 channels stable match") {
		t.Errorf("rollback matching two channels = %v, want an error", err)
	}
}

func TestImagesDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	cat := imagesCatalog(t)
	if _, err := runImages(t, "promote", "A", "--catalog", cat); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(cat)
	out, err := runImages(t, "promote", "B", "--dry-run", "--catalog", cat)
	if err != nil || !strings.Contains(out, "would point to B") {
		t.Errorf("promote --dry-run = %q, %v", out, err)
	}
	out, err = runImages(t, "rollback", "--dry-run", "--reason", "test", "--catalog", cat)
	if err == nil {
		t.Errorf("rollback with no history succeeded: %s", out)
	}
	after, _ := os.ReadFile(cat)
	if !bytes.Equal(before, after) {
		t.Error("a --dry-run changed the catalog file")
	}
}

func TestImagesShowAndOutputs(t *testing.T) {
	t.Parallel()
	cat := imagesCatalog(t)
	out, err := runImages(t, "show", "C", "--catalog", cat)
	if err != nil || !strings.Contains(out, "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1704") || !strings.Contains(out, "kubelet") {
		t.Errorf("show C: %v\n%s", err, out)
	}
	out, err = runImages(t, "show", "C", "--catalog", cat, "-o", "json")
	var im imagecatalog.Image
	if err != nil || json.Unmarshal([]byte(out), &im) != nil || im.ID != "C" || im.Manifest.Components["kubelet"] != "1.0.0-1" {
		t.Errorf("show -o json: %v\n%s", err, out)
	}
	out, err = runImages(t, "list", "--catalog", cat, "-o", "yaml")
	var rows []imagecatalog.Image
	if err != nil || yaml.Unmarshal([]byte(out), &rows) != nil || len(rows) != 5 {
		t.Errorf("list -o yaml: %v\n%s", err, out)
	}
	if _, err := runImages(t, "show", "Z", "--catalog", cat); err == nil {
		t.Error("show of an unknown image succeeded")
	}
	if _, err := runImages(t, "list", "--catalog", cat, "-o", "xml"); err == nil {
		t.Error("-o xml accepted")
	}
	if _, err := runImages(t, "promote", "A", "--channel", "stable", "--catalog", filepath.Join(t.TempDir(), "none.yaml")); err == nil {
		t.Error("promote in an empty catalog succeeded")
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
