package imagecatalog

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	digestA = "sha256:" + strings.Repeat("a", 64)
	digestB = "sha256:" + strings.Repeat("b", 64)
)

func TestParseImageRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ref     string
		want    ImageRef
		wantErr bool
	}{
		{ref: "registry.k8s.io/pause:3.10", want: ImageRef{Name: "registry.k8s.io/pause", Tag: "3.10"}},
		{ref: "172.18.0.1:5000/prebake/pause:1", want: ImageRef{Name: "172.18.0.1:5000/prebake/pause", Tag: "1"}},
		{ref: "172.18.0.1:5000/prebake/pause", want: ImageRef{Name: "172.18.0.1:5000/prebake/pause"}},
		{ref: "r.example/app@" + digestA, want: ImageRef{Name: "r.example/app", Digest: digestA}},
		{ref: "r.example:443/team/app:1.2@" + digestA, want: ImageRef{Name: "r.example:443/team/app", Tag: "1.2", Digest: digestA}},
		{ref: "busybox:1.36", wantErr: true}, // not fully qualified: ctr can't pull it
		{ref: "", wantErr: true},
		{ref: "r.example/app:1 ", wantErr: true},
		{ref: "r.example/app@sha256:abc", wantErr: true},
		{ref: "R.example/app:1", wantErr: true},
	} {
		got, err := ParseImageRef(tc.ref)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "not a fully qualified image reference") {
				t.Errorf("ParseImageRef(%q) = %+v, %v; want an error", tc.ref, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseImageRef(%q) = %+v, %v; want %+v", tc.ref, got, err, tc.want)
		}
	}
}

func TestManifestValidatesContainerImages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		images  map[string]string
		wantErr string
	}{
		{name: "by tag", images: map[string]string{"registry.k8s.io/pause:3.10": digestA}},
		{name: "pinned", images: map[string]string{"r.example/app:1@" + digestA: digestA}},
		{name: "no digest", images: map[string]string{"registry.k8s.io/pause:3.10": ""}, wantErr: `containerImages[registry.k8s.io/pause:3.10]: digest "" is not sha256:<64 hex>`},
		{name: "pinned elsewhere", images: map[string]string{"r.example/app:1@" + digestA: digestB}, wantErr: "pinned to " + digestA + ", recorded " + digestB},
		{name: "not a reference", images: map[string]string{"pause": digestA}, wantErr: `containerImages: "pause" is not a fully qualified`},
	} {
		m := DefaultManifest(testVersions())
		m.ContainerImages = tc.images
		err := m.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestVerifyBuildChecksContainerImages(t *testing.T) {
	t.Parallel()
	pinned := "r.example/app:1@" + digestA
	spec := BuildSpec{OS: "ubuntu", Components: testVersions(), ContainerImages: []string{"registry.k8s.io/pause:3.10", pinned}}
	report := func(images map[string]string) Report {
		r := Report{Status: "done", Observed: spec.Manifest(), Hygiene: map[string]bool{}}
		for _, c := range HygieneChecks {
			r.Hygiene[c] = true
		}
		r.Observed.ContainerImages = images
		return r
	}
	for _, tc := range []struct {
		name     string
		observed map[string]string
		want     []string // "" entries: none
	}{
		{name: "every image, pinned one at its digest", observed: map[string]string{"registry.k8s.io/pause:3.10": digestB, pinned: digestA}},
		{name: "one missing", observed: map[string]string{pinned: digestA},
			want: []string{"container image registry.k8s.io/pause:3.10 is not in the report"}},
		{name: "pinned image at another digest", observed: map[string]string{"registry.k8s.io/pause:3.10": digestB, pinned: digestB},
			want: []string{"container image " + pinned + ": pinned to " + digestA + ", but the builder pulled " + digestB}},
		{name: "none reported", observed: nil,
			want: []string{"registry.k8s.io/pause:3.10 is not in the report", pinned + " is not in the report"}},
	} {
		err := VerifyBuild(spec, report(tc.observed))
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: VerifyBuild = %v, want nil", tc.name, err)
			}
			continue
		}
		var ve *VerifyError
		if !errors.As(err, &ve) {
			t.Fatalf("%s: VerifyBuild = %v, want a *VerifyError", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q:\n%v", tc.name, w, err)
			}
		}
	}
	// VerifyFor knows no recipe list: a report without images passes it.
	if err := VerifyFor(FamilyUbuntu, spec.Manifest(), report(nil)); err != nil {
		t.Errorf("VerifyFor without a list: %v", err)
	}
}

func TestMissingContainerImages(t *testing.T) {
	t.Parallel()
	m := Manifest{ContainerImages: map[string]string{
		"registry.k8s.io/pause:3.10":      digestA,
		"r.example/app:1.2@" + digestB:    digestB,
		"r.example/other@" + digestA:      digestA,
		"r.example/latest-only:latest":    digestB,
		"r.example:5000/team/tool:v1.0.0": digestA,
	}}
	for _, tc := range []struct {
		want    []string
		missing []string
	}{
		{want: nil},
		{want: []string{"registry.k8s.io/pause:3.10", "r.example:5000/team/tool:v1.0.0"}},
		// By digest, by tag, or both: the builder names the image each way.
		{want: []string{"registry.k8s.io/pause@" + digestA, "r.example/app:1.2", "r.example/app@" + digestB, "r.example/app:1.2@" + digestB}},
		{want: []string{"registry.k8s.io/pause:3.9", "registry.k8s.io/pause@" + digestB, "r.example/app:1.2@" + digestA},
			missing: []string{"registry.k8s.io/pause:3.9", "registry.k8s.io/pause@" + digestB, "r.example/app:1.2@" + digestA}},
		{want: []string{"r.example/other:1", "r.example/nothing:1", "r.example/latest-only"}, missing: []string{"r.example/other:1", "r.example/nothing:1"}},
	} {
		if d := cmp.Diff(tc.missing, m.MissingContainerImages(tc.want)); d != "" {
			t.Errorf("MissingContainerImages(%q) (-want +got):\n%s", tc.want, d)
		}
	}
	if got := (Manifest{}).MissingContainerImages([]string{"registry.k8s.io/pause:3.10"}); len(got) != 1 {
		t.Errorf("an image without container images holds %v of one", got)
	}
}

// TestResolvePreferringContainerImages: the channels decide; the group's list
// only breaks a tie Resolve refuses, and says what the image it returns
// lacks.
func TestResolvePreferringContainerImages(t *testing.T) {
	t.Parallel()
	pause := "registry.k8s.io/pause:3.10"
	app := "r.example/app:1.2"
	ubuntu := testImage("U", 1)
	debian := testImage("D", 2)
	debian.Name = Name{OS: "debian", OSVersion: "12", K8s: Version{1, 34, 2}, Arch: "amd64", Built: debian.Created}.String()
	ubuntu.Manifest.ContainerImages = map[string]string{pause: digestA}
	debian.Manifest.ContainerImages = map[string]string{pause: digestA, app: digestB}
	c := stableCatalog(t, ubuntu, debian)
	anyOS := Query{Channel: ChannelStable, Key: Key{OS: Any, K8sMinor: "1.34", Arch: "amd64", Provider: "hcloud", Location: Any}}

	// No list: the two channels are ambiguous, as ever.
	if _, err := Resolve(c, anyOS); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Resolve over two channels = %v, want ambiguous", err)
	}
	// Only debian's image holds app: it breaks the tie.
	id, missing, err := ResolvePreferring(c, anyOS, []string{pause, app})
	if err != nil || id != "D" || len(missing) != 0 {
		t.Errorf("ResolvePreferring(pause, app) = %q, %v, %v; want D with nothing missing", id, missing, err)
	}
	// Both hold pause: still ambiguous, and the error says the list did not help.
	_, _, err = ResolvePreferring(c, anyOS, []string{pause})
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "2 of them hold every image of the group's containerImages") {
		t.Errorf("ResolvePreferring(pause) = %v, want ambiguous naming the 2 that hold it", err)
	}
	// Neither holds it.
	_, _, err = ResolvePreferring(c, anyOS, []string{"r.example/nothing:1"})
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "0 of them") {
		t.Errorf("ResolvePreferring(nothing) = %v, want ambiguous naming 0", err)
	}
	// A deprecated holder breaks no tie.
	dep, _, err := Deprecate(c, "D", "CVE", t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ResolvePreferring(dep, anyOS, []string{pause, app}); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("with the holder deprecated: %v, want ambiguous", err)
	}
	// One channel: its image, whatever it lacks, and what it lacks.
	ubuntuOnly := anyOS
	ubuntuOnly.OS = "ubuntu-2404"
	id, missing, err = ResolvePreferring(c, ubuntuOnly, []string{pause, app})
	if err != nil || id != "U" || !cmp.Equal(missing, []string{app}) {
		t.Errorf("ResolvePreferring(ubuntu, pause+app) = %q, %v, %v; want U missing %s", id, missing, err, app)
	}
}

// TestReplaceKeepsContainerImages: sync rebuilds images from labels, which
// can't carry the digests; the catalog's copy of an image keeps them.
func TestReplaceKeepsContainerImages(t *testing.T) {
	t.Parallel()
	im := testImage("U", 1)
	im.Manifest.ContainerImages = map[string]string{"registry.k8s.io/pause:3.10": digestA}
	old := stableCatalog(t, im)
	fromLabels := im
	fromLabels.Manifest.ContainerImages = nil
	fresh := stableCatalog(t, fromLabels)
	got, err := Replace(old, fresh, "hcloud", "")
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := got.Image("U"); !cmp.Equal(g.Manifest.ContainerImages, im.Manifest.ContainerImages) {
		t.Errorf("after Replace the image holds %v, want %v", g.Manifest.ContainerImages, im.Manifest.ContainerImages)
	}
}

// stableCatalog publishes ims and points stable at each, in order.
func stableCatalog(t *testing.T, ims ...Image) Catalog {
	t.Helper()
	var c Catalog
	for _, im := range ims {
		c = must[Catalog](t)(Publish(c, im))
	}
	for _, im := range ims {
		c = promote(t, c, ChannelStable, im.ID)
	}
	return c
}
