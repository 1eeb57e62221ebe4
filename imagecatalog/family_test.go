package imagecatalog

import (
	"errors"
	"strings"
	"testing"
)

func TestFamilyOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		os       string
		family   Family
		known    bool
		renderer Renderer
	}{
		{"ubuntu", FamilyUbuntu, true, RendererCloudInit},
		{"ubuntu-2404", FamilyUbuntu, true, RendererCloudInit},
		{"debian-12", FamilyDebian, true, RendererCloudInit},
		{"flatcar-4230", FamilyFlatcar, true, RendererIgnition},
		{"fcos", FamilyFCOS, true, RendererIgnition},
		{"fcos-42", FamilyFCOS, true, RendererIgnition},
		// Names are not restricted to the families; others render cloud-init, as before.
		{"rocky-9", "rocky", false, RendererCloudInit},
		{"flatcarx-1", "flatcarx", false, RendererCloudInit},
	} {
		f, known := FamilyOf(tt.os)
		if f != tt.family || known != tt.known || f.Renderer() != tt.renderer {
			t.Errorf("FamilyOf(%q) = %q, %v (renderer %s); want %q, %v (%s)", tt.os, f, known, f.Renderer(), tt.family, tt.known, tt.renderer)
		}
	}
}

// flatcarImage is a verified Flatcar 4230, k8s 1.35.4 image whose manifest bakes the sysext.
func flatcarImage(id, provider string, i int) Image {
	im := testImage(id, i)
	built := im.Created
	im.Name = Name{OS: "flatcar", OSVersion: "4230", K8s: Version{1, 35, 4}, Arch: "amd64", Built: built}.String()
	im.Provider = provider
	im.Manifest = ManifestFor(FamilyFlatcar, map[string]string{SysextComponent: "v1.35.4"})
	return im
}

var flatcarKey = Key{OS: "flatcar-4230", K8sMinor: "1.35", Arch: "amd64", Provider: "hcloud"}

// mixedCatalog has a stable channel for ubuntu (image U) and one for Flatcar (image F),
// both on hcloud amd64.
func mixedCatalog(t *testing.T) Catalog {
	t.Helper()
	var c Catalog
	c = must[Catalog](t)(Publish(c, testImage("U", 0)))
	c = must[Catalog](t)(Publish(c, flatcarImage("F", "hcloud", 1)))
	c = promote(t, c, ChannelStable, "U")
	c = promote(t, c, ChannelStable, "F")
	return c
}

func TestChooseRenderer(t *testing.T) {
	t.Parallel()
	c := mixedCatalog(t)
	for _, tt := range []struct {
		image, groupOS string
		want           Renderer
	}{
		{"F", "", RendererIgnition},
		{"U", "", RendererCloudInit},
		// The image decides, not the group's narrowing.
		{"F", "ubuntu-2404", RendererIgnition},
		// Runtime install: the group's OS says what the provider's base image is.
		{"", "flatcar-4230", RendererIgnition},
		{"", "fcos-42", RendererIgnition},
		{"", "debian-12", RendererCloudInit},
		{"", "", RendererCloudInit},
	} {
		got, err := ChooseRenderer(c, tt.image, tt.groupOS)
		if err != nil || got != tt.want {
			t.Errorf("ChooseRenderer(%q, %q) = %s, %v; want %s", tt.image, tt.groupOS, got, err, tt.want)
		}
	}
	for _, tt := range []struct {
		image, groupOS string
		want           Family
	}{{"F", "", FamilyFlatcar}, {"U", "fcos-42", FamilyUbuntu}, {"", "fcos-42", FamilyFCOS}, {"", "", FamilyDebian}} {
		if got, err := ChooseFamily(c, tt.image, tt.groupOS); err != nil || got != tt.want {
			t.Errorf("ChooseFamily(%q, %q) = %s, %v; want %s", tt.image, tt.groupOS, got, err, tt.want)
		}
	}
	if _, err := ChooseRenderer(c, "gone", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("an image the catalog lacks: %v, want ErrNotFound", err)
	}
}

// TestChannelFamily: a query's family comes from the matching channels' keys when they
// configure nodes one way; two renderers or no channel give none.
func TestChannelFamily(t *testing.T) {
	t.Parallel()
	c := mixedCatalog(t)
	q := func(os, provider string) Query {
		return Query{Channel: ChannelStable, Key: Key{OS: os, K8sMinor: Any, Arch: "amd64", Provider: provider, Location: Any}}
	}
	// A channel key that points nowhere yet still says what its machines are.
	c.Channels = append(c.Channels, Channel{Name: "candidate", Key: Key{OS: "fcos-42", K8sMinor: "1.35", Arch: "amd64", Provider: "gce"}})
	c.Channels = append(c.Channels, Channel{Name: ChannelStable, Key: Key{OS: "flatcar-4230", K8sMinor: "1.35", Arch: "amd64", Provider: "gce"}})
	c.Channels = append(c.Channels, Channel{Name: ChannelStable, Key: Key{OS: "fcos-42", K8sMinor: "1.35", Arch: "amd64", Provider: "gce"}})
	for _, tt := range []struct {
		name string
		q    Query
		want Family
		ok   bool
	}{
		{"flatcar only", q("flatcar-4230", "hcloud"), FamilyFlatcar, true},
		{"ubuntu only", q("ubuntu-2404", "hcloud"), FamilyUbuntu, true},
		{"two renderers", q(Any, "hcloud"), "", false},
		{"no channel", q(Any, "static"), "", false},
		{"empty channel", Query{Channel: "candidate", Key: q(Any, "gce").Key}, FamilyFCOS, true},
		{"two Ignition families", q(Any, "gce"), FamilyFlatcar, true},
	} {
		got, ok := ChannelFamily(c, tt.q)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: ChannelFamily = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCheckRenderers(t *testing.T) {
	t.Parallel()
	c := mixedCatalog(t)
	all := Query{Channel: ChannelStable, Key: Key{OS: Any, K8sMinor: Any, Arch: Any, Provider: "hcloud", Location: Any}}
	err := CheckRenderers(c, all)
	if !errors.Is(err, ErrMixedRenderers) {
		t.Fatalf("a channel holding Flatcar and Ubuntu with os unset: %v, want ErrMixedRenderers", err)
	}
	for _, s := range []string{"cloud-init via stable (os=ubuntu-2404", "ignition via stable (os=flatcar-4230"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}
	// Narrowing the OS to one release fixes it; so does another provider's query.
	narrowed := all
	narrowed.OS = "flatcar-4230"
	if err := CheckRenderers(c, narrowed); err != nil {
		t.Errorf("narrowed to flatcar-4230: %v", err)
	}
	gce := all
	gce.Provider = "gce"
	if err := CheckRenderers(c, gce); err != nil {
		t.Errorf("no gce channels: %v", err)
	}
	rs := QueryRenderers(c, narrowed)
	if len(rs) != 1 || len(rs[RendererIgnition]) != 1 {
		t.Errorf("QueryRenderers(flatcar) = %v", rs)
	}
}

func TestManifestValidateFor(t *testing.T) {
	t.Parallel()
	flatcar := ManifestFor(FamilyFlatcar, map[string]string{SysextComponent: "v1.35.4"})
	if err := flatcar.ValidateFor(FamilyFlatcar); err != nil {
		t.Errorf("a Flatcar manifest with the sysext: %v", err)
	}
	if err := flatcar.ValidateFor(FamilyFCOS); err != nil {
		t.Errorf("the same for FCOS: %v", err)
	}
	// A Debian image must still bake the apt set, and a Flatcar one the sysext.
	if err := flatcar.Validate(); err == nil || !strings.Contains(err.Error(), "kubelet is missing") {
		t.Errorf("Validate (Debian) of a sysext manifest: %v, want kubelet missing", err)
	}
	if err := DefaultManifest(testVersions()).ValidateFor(FamilyFlatcar); err == nil || !strings.Contains(err.Error(), SysextComponent+" is missing") {
		t.Errorf("a Debian manifest as Flatcar's: %v, want %s missing", err, SysextComponent)
	}
	bad := ManifestFor(FamilyFCOS, map[string]string{SysextComponent: "latest"})
	if err := bad.ValidateFor(FamilyFCOS); err == nil || !strings.Contains(err.Error(), "not exact") {
		t.Errorf("sysext at latest: %v", err)
	}

	// A catalog holds both, each checked for its own family.
	c := mixedCatalog(t)
	if err := c.Validate(); err != nil {
		t.Errorf("catalog with a Flatcar image: %v", err)
	}
	c.Images[0].Manifest = DefaultManifest(testVersions())
	if c.Images[0].Name[:len("prebake-flatcar")] != "prebake-flatcar" {
		t.Fatalf("image 0 is %s; the test expects the Flatcar image first", c.Images[0].Name)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), SysextComponent+" is missing") {
		t.Errorf("a Flatcar image with a Debian manifest: %v", err)
	}
	if k := must[Key](t)(c.Images[0].Key()); k != flatcarKey {
		t.Errorf("Flatcar image key %s, want %s", k, flatcarKey)
	}
}

const flatcarRecipeImage = `  - os: flatcar
    osVersion: "4230"
    kubernetes: 1.35.4
    arch: amd64
    provider: hcloud
    baseImage: "123456"
    machineType: cx22
    userDataFile: b.sh
    components:
      kubernetes-sysext: v1.35.4
`

func TestLoadRecipeFamilies(t *testing.T) {
	t.Parallel()
	recipe := "apiVersion: prebake.dev/v1alpha1\nkind: ImageRecipe\nimages:\n"
	specs, err := LoadRecipe(writeRecipeFiles(t, recipe+flatcarRecipeImage))
	if err != nil {
		t.Fatal(err)
	}
	s := specs[0]
	if s.Family() != FamilyFlatcar || s.Key() != flatcarKey || len(s.Manifest().Components) != 1 {
		t.Errorf("spec %+v: family %s, key %s, manifest %v", s, s.Family(), s.Key(), s.Manifest())
	}
	for name, tt := range map[string]struct{ recipe, want string }{
		"unknown os": {recipeText(strings.Replace(goodImage, "os: ubuntu", "os: rocky", 1)), `images[0].os "rocky": want an OS family the catalog knows: debian, ubuntu, flatcar, fcos`},
		"flatcar without the sysext": {recipe + strings.Replace(flatcarRecipeImage, "kubernetes-sysext", "kubelet", 1),
			"components: kubernetes-sysext missing"},
		"flatcar without a builder config": {recipe + strings.Replace(flatcarRecipeImage, "    userDataFile: b.sh\n", "", 1),
			"images[0].userDataFile: a flatcar image needs its builder's Ignition config"},
		"fcos sysext at a range": {recipe + strings.Replace(strings.Replace(flatcarRecipeImage, "os: flatcar", "os: fcos", 1), "sysext: v1.35.4", "sysext: '>=1.35'", 1),
			"is not exact"},
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
