package imagecatalog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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

	// containerImages are read for the CLI's builder user-data.
	withImages := strings.Replace(goodImage, "    userDataFile: b.sh\n", "    containerImages: [172.18.0.1:5000/prebake/pause:1]\n", 1)
	specs, err = LoadRecipe(writeRecipeFiles(t, recipeText(withImages)))
	if err != nil || len(specs) != 1 || !slices.Equal(specs[0].ContainerImages, []string{"172.18.0.1:5000/prebake/pause:1"}) {
		t.Fatalf("recipe with containerImages: %+v, %v", specs, err)
	}

	for name, tt := range map[string]struct{ recipe, want string }{
		"images and file": {recipeText(goodImage + "    containerImages: [r:5000/pause:1]\n"), "images[0].containerImages: prebake pulls them"},
		"empty image":     {recipeText(strings.Replace(goodImage, "    userDataFile: b.sh\n", "    containerImages: [\"\"]\n", 1)), `images[0].containerImages[0]: "" is not a fully qualified image reference`},
		"short image":     {recipeText(strings.Replace(goodImage, "    userDataFile: b.sh\n", "    containerImages: [busybox:1.36]\n", 1)), `images[0].containerImages[0]: "busybox:1.36" is not a fully qualified`},
		"image twice": {recipeText(strings.Replace(goodImage, "    userDataFile: b.sh\n", "    containerImages: [r.example/a:1, r.example/b:1, r.example/a:1]\n", 1)),
			`images[0].containerImages[2]: "r.example/a:1" is listed twice (also [0])`},
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

// FuzzDecodeReport: any bytes decode without panicking, and a report that
// decodes survives encoding and decoding again unchanged.
func FuzzDecodeReport(f *testing.F) {
	f.Add([]byte(`{"status":"done","observed":{"components":{"kubelet":"1.34.2-1.1"}},"hygiene":{"ssh-host-keys":true}}`))
	f.Add([]byte(`{"status":"failed","observed":{},"hygiene":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeReport(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("a decoded report does not encode: %v", err)
		}
		back, err := DecodeReport(again)
		if err != nil {
			t.Fatalf("%s decoded, but its encoding %s does not: %v", data, again, err)
		}
		if d := cmp.Diff(r, back, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("round trip of %s (-first +second):\n%s", data, d)
		}
	})
}

// TestRecipeContainerImagesChangeTheInputsHash: the recipe's containerImages
// are an input of their own. Another list is another image, even when the
// user-data (which the CLI renders from the list) is held the same; the
// list's order and its rendering do not matter.
func TestRecipeContainerImagesChangeTheInputsHash(t *testing.T) {
	t.Parallel()
	load := func(images string) BuildSpec {
		t.Helper()
		r := recipeText(strings.Replace(goodImage, "    userDataFile: b.sh\n", "    containerImages: "+images+"\n", 1))
		specs, err := LoadRecipe(writeRecipeFiles(t, r))
		if err != nil {
			t.Fatal(err)
		}
		// The same user-data for every list: only the list itself may count.
		specs[0].UserData = []byte("#cloud-config\n")
		return specs[0]
	}
	pause := "registry.k8s.io/pause:3.10"
	app := "registry.example/team/app:1.2@sha256:" + strings.Repeat("c", 64)
	one := InputsHash(load("[" + pause + "]").Inputs())
	two := InputsHash(load("[" + pause + ", " + app + "]").Inputs())
	swapped := InputsHash(load("[" + app + ", " + pause + "]").Inputs())
	none := InputsHash(load("[]").Inputs())
	if one == two || one == none || two == none {
		t.Errorf("inputs hashes: one image %s, two %s, none %s; want three different hashes", one, two, none)
	}
	if two != swapped {
		t.Errorf("the same images in another order hash %s, want %s", swapped, two)
	}
	retagged := InputsHash(load("[registry.k8s.io/pause:3.9]").Inputs())
	if retagged == one {
		t.Error("another tag of the same image does not change the inputs hash")
	}
}
