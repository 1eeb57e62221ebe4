package imagecatalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeRecipeFiles(t *testing.T, recipe string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "b.sh"), []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "recipe.yaml")
	if err := os.WriteFile(p, []byte(recipe), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func recipeText(image string) string {
	var comps strings.Builder
	for _, c := range DefaultComponents {
		comps.WriteString("      " + c + ": 1.0.0-1\n")
	}
	return "apiVersion: prebake.dev/v1alpha1\nkind: ImageRecipe\nimages:\n" + image + "    components:\n" + comps.String()
}

const goodImage = `  - os: ubuntu
    osVersion: "2404"
    kubernetes: 1.34.2
    arch: amd64
    provider: hcloud
    baseImage: ubuntu-24.04
    machineType: cx22
    userDataFile: b.sh
`

func TestLoadRecipe(t *testing.T) {
	t.Parallel()
	specs, err := LoadRecipe(writeRecipeFiles(t, recipeText(goodImage)))
	if err != nil {
		t.Fatal(err)
	}
	s := specs[0]
	if s.Key() != (Key{OS: "ubuntu-2404", K8sMinor: "1.34", Arch: "amd64", Provider: "hcloud"}) || string(s.UserData) != "#!/bin/sh\n" || s.channel() != ChannelCandidate {
		t.Errorf("spec = %+v (key %s)", s, s.Key())
	}
	// Without userDataFile the spec has no user-data yet: the CLI renders bootstrap's builder.
	specs, err = LoadRecipe(writeRecipeFiles(t, recipeText(strings.Replace(goodImage, "    userDataFile: b.sh\n", "", 1))))
	if err != nil || len(specs) != 1 {
		t.Fatalf("recipe without userDataFile: %d specs, %v; want one", len(specs), err)
	}
	if specs[0].UserData != nil {
		t.Errorf("recipe without userDataFile: user-data %q, want none (the CLI renders it)", specs[0].UserData)
	}
	// The user-data is an input: another script, another hash.
	other := s
	other.UserData = []byte("#!/bin/sh\necho changed\n")
	if InputsHash(s.Inputs()) == InputsHash(other.Inputs()) {
		t.Error("changing the user-data does not change the inputs hash")
	}

	for name, tt := range map[string]struct{ recipe, want string }{
		"unknown field":   {recipeText(strings.Replace(goodImage, "arch: amd64", "arch: amd64\n    archh: x", 1)), "field archh not found"},
		"bad version":     {recipeText(strings.Replace(goodImage, "1.34.2", "1.34", 1)), "images[0].kubernetes"},
		"bad arch":        {recipeText(strings.Replace(goodImage, "amd64", "x86", 1)), "images[0]"},
		"missing file":    {recipeText(strings.Replace(goodImage, "b.sh", "nope.sh", 1)), "images[0].userDataFile"},
		"inexact version": {strings.Replace(recipeText(goodImage), "kubelet: 1.0.0-1", "kubelet: latest", 1), `kubelet version "latest" is not exact`},
		"missing package": {strings.Replace(recipeText(goodImage), "      socat: 1.0.0-1\n", "", 1), "components: socat missing"},
		"wrong kind":      {strings.Replace(recipeText(goodImage), "ImageRecipe", "ImageCatalog", 1), `kind "ImageCatalog"`},
		"no images":       {"apiVersion: prebake.dev/v1alpha1\nkind: ImageRecipe\nimages: []\n", "images is empty"},
		"empty":           {"", "empty"},
		"no machine type": {recipeText(strings.Replace(goodImage, "    machineType: cx22\n", "", 1)), "machineType is required"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadRecipe(writeRecipeFiles(t, tt.recipe))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadRecipe: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// FuzzParseReport: any labels parse without panicking, and a report that
// parses survives ReportLabels and ParseReport unchanged.
func FuzzParseReport(f *testing.F) {
	f.Add("done", "kubelet", "1_d34_d2-1_d1", "ssh-host-keys", "pass")
	f.Add("failed", "x", "_u", "machine-id", "fail")
	f.Fuzz(func(t *testing.T, status, pkg, ver, check, result string) {
		l := map[string]string{LabelReport: status, labelPkgPrefix + pkg: ver, labelHygienePrefix + check: result}
		r, ok, err := ParseReport(l)
		if err != nil || !ok {
			return
		}
		rl, err := ReportLabels(r)
		if err != nil {
			return // e.g. a decoded version that no longer encodes to a valid value
		}
		back, _, err := ParseReport(rl)
		if err != nil || back.Status != r.Status || len(back.Observed.Components) != len(r.Observed.Components) {
			t.Fatalf("round trip of %v: %+v -> %+v, %v", l, r, back, err)
		}
	})
}
