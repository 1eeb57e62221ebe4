package imagecatalog

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC)

// testImage is a verified ubuntu 24.04, k8s 1.34.2, amd64 hcloud image built i
// hours after t0.
func testImage(id string, i int) Image {
	built := t0.Add(time.Duration(i) * time.Hour)
	name := Name{OS: "ubuntu", OSVersion: "2404", K8s: Version{1, 34, 2}, Arch: "amd64", Built: built}
	return Image{
		ID: id, Name: name.String(), Provider: "hcloud", InputsHash: strings.Repeat("a", InputsHashLen-1) + string(rune('0'+i)),
		Created: built, Manifest: DefaultManifest(testVersions()), Verified: &Event{At: built, Reason: "goss: ok"},
	}
}

var testKey = Key{OS: "ubuntu-2404", K8sMinor: "1.34", Arch: "amd64", Provider: "hcloud"}

// must adapts a (value, error) call for a test: must[Catalog](t)(Publish(…)).
func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func promote(t *testing.T, c Catalog, channel, id string) Catalog {
	t.Helper()
	out, changed, err := Promote(c, channel, id, t0)
	if err != nil || !changed {
		t.Fatalf("Promote(%s, %s) = changed %v, %v", channel, id, changed, err)
	}
	return out
}

// scenario is the acceptance scenario over the pure model: publish
// A-E; promote A, B, C to stable; roll stable back; point candidate at D.
func scenario(t *testing.T) Catalog {
	t.Helper()
	var c Catalog
	for i, id := range []string{"A", "B", "C", "D", "E"} {
		c = must[Catalog](t)(Publish(c, testImage(id, i)))
	}
	for _, id := range []string{"A", "B", "C"} {
		c = promote(t, c, ChannelStable, id)
	}
	stable, _ := c.Channel(ChannelStable, testKey)
	if got, want := historyIDs(stable), []string{"C", "B", "A"}; !cmp.Equal(got, want) {
		t.Fatalf("after promotions stable = %v, want %v", got, want)
	}
	c = must[Catalog](t)(Rollback(c, ChannelStable, testKey, "C fails canary join", t0.Add(time.Hour)))
	stable, _ = c.Channel(ChannelStable, testKey)
	if got, want := historyIDs(stable), []string{"B", "A"}; !cmp.Equal(got, want) {
		t.Fatalf("after rollback stable = %v, want %v", got, want)
	}
	want := []Entry{{Image: "C", At: t0.Add(time.Hour), Reason: "C fails canary join"}}
	if d := cmp.Diff(want, stable.RolledBack); d != "" {
		t.Fatalf("rolled back (-want +got):\n%s", d)
	}
	return promote(t, c, ChannelCandidate, "D")
}

// historyIDs is the channel's current image followed by its history.
func historyIDs(ch Channel) []string {
	out := []string{ch.Image}
	for _, h := range ch.History {
		out = append(out, h.Image)
	}
	return out
}

func keptIDs(p GCPlan) []string {
	var out []string
	for _, k := range p.Keep {
		out = append(out, k.ID)
	}
	return out
}

func TestAcceptanceScenarioGC(t *testing.T) {
	t.Parallel()
	c := scenario(t)
	tests := []struct {
		name       string
		opts       GCOptions
		keep, del  []string
		protect    []string
		reasonOfID map[string]string
	}{
		{
			name: "keep-history 1", opts: GCOptions{KeepHistory: 1},
			keep: []string{"A", "B", "D"}, del: []string{"C", "E"}, protect: []string{"A", "B", "D"},
			reasonOfID: map[string]string{"A": "step 1 of channel stable's history", "B": "channel stable points to it", "D": "channel candidate points to it"},
		},
		{
			name: "keep-history 1, live instance on C", opts: GCOptions{KeepHistory: 1, InUse: map[string]bool{"C": true}},
			keep: []string{"A", "B", "C", "D"}, del: []string{"E"}, protect: []string{"A", "B", "D"},
			reasonOfID: map[string]string{"C": "a live instance uses it"},
		},
		{
			name: "keep-history 0", opts: GCOptions{KeepHistory: 0},
			keep: []string{"B", "D"}, del: []string{"A", "C", "E"}, protect: []string{"B", "D"},
		},
		{
			name: "default keep-history", opts: GCOptions{KeepHistory: DefaultKeepHistory},
			keep: []string{"A", "B", "D"}, del: []string{"C", "E"}, protect: []string{"A", "B", "D"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := must[GCPlan](t)(PlanGC(c, tt.opts))
			if d := cmp.Diff(tt.keep, keptIDs(p)); d != "" {
				t.Errorf("keep (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.del, p.Delete); d != "" {
				t.Errorf("delete (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.protect, p.Protect); d != "" {
				t.Errorf("protect (-want +got):\n%s", d)
			}
			for id, reason := range tt.reasonOfID {
				for _, k := range p.Keep {
					if k.ID == id && !strings.Contains(strings.Join(k.Reasons, "; "), reason) {
						t.Errorf("%s kept for %q, want a reason containing %q", id, k.Reasons, reason)
					}
				}
			}
		})
	}
}

func TestForgetAfterGC(t *testing.T) {
	t.Parallel()
	c := scenario(t)
	p := must[GCPlan](t)(PlanGC(c, GCOptions{KeepHistory: 0}))
	c = must[Catalog](t)(Forget(c, p.Delete))
	stable, _ := c.Channel(ChannelStable, testKey)
	if len(stable.History) != 0 {
		t.Errorf("stable history after forgetting A = %v, want empty", stable.History)
	}
	if _, err := Rollback(c, ChannelStable, testKey, "again", t0); !errors.Is(err, ErrNoHistory) {
		t.Errorf("Rollback onto a deleted image: %v, want ErrNoHistory", err)
	}
	if len(stable.RolledBack) != 1 {
		t.Errorf("the rollback record was lost: %v", stable.RolledBack)
	}
	if _, err := Forget(c, []string{"B"}); err == nil {
		t.Error("Forget of the image stable points to succeeded")
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestPromoteRefuses(t *testing.T) {
	t.Parallel()
	unverified := testImage("U", 1)
	unverified.Verified = nil
	deprecated := testImage("X", 2)
	deprecated.Deprecated = &Event{At: t0, Reason: "CVE-2026-0001"}
	var c Catalog
	for _, im := range []Image{testImage("A", 0), unverified, deprecated} {
		c = must[Catalog](t)(Publish(c, im))
	}
	tests := []struct {
		channel, id string
		want        error
	}{
		{ChannelStable, "U", ErrUnverified},
		{ChannelStable, "X", ErrDeprecated},
		{ChannelStable, "nope", ErrNotFound},
		{"Stable!", "A", nil},
	}
	for _, tt := range tests {
		out, changed, err := Promote(c, tt.channel, tt.id, t0)
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("Promote(%s, %s) = %v, want %v", tt.channel, tt.id, err, tt.want)
		}
		if changed || !cmp.Equal(out, c) {
			t.Errorf("Promote(%s, %s) failed but changed the catalog", tt.channel, tt.id)
		}
	}
	c = promote(t, c, ChannelStable, "A")
	if _, changed, err := Promote(c, ChannelStable, "A", t0); err != nil || changed {
		t.Errorf("promoting the current image again: changed %v, %v; want a no-op", changed, err)
	}
}

func TestOperationsDoNotModifyTheirArgument(t *testing.T) {
	t.Parallel()
	c := scenario(t)
	before := c.Clone()
	_, _, _ = Promote(c, ChannelStable, "E", t0)
	_, _ = Rollback(c, ChannelStable, testKey, "x", t0)
	_, _, _ = Deprecate(c, "B", "x", t0)
	_, _ = Forget(c, []string{"E"})
	_, _ = Publish(c, testImage("F", 7))
	if d := cmp.Diff(before, c); d != "" {
		t.Errorf("an operation modified its argument (-before +after):\n%s", d)
	}
}

func TestRollbackRefuses(t *testing.T) {
	t.Parallel()
	c := scenario(t)
	if _, err := Rollback(c, ChannelCandidate, testKey, "bad", t0); !errors.Is(err, ErrNoHistory) {
		t.Errorf("rollback of candidate (no history): %v, want ErrNoHistory", err)
	}
	if _, err := Rollback(c, "beta", testKey, "bad", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("rollback of a missing channel: %v, want ErrNotFound", err)
	}
	if _, err := Rollback(c, ChannelStable, testKey, " ", t0); err == nil {
		t.Error("rollback without a reason succeeded")
	}
	dep := must3(t)(Deprecate(c, "A", "CVE", t0))
	if _, err := Rollback(dep, ChannelStable, testKey, "bad", t0); !errors.Is(err, ErrDeprecated) {
		t.Errorf("rollback onto a deprecated image: %v, want ErrDeprecated", err)
	}
}

func must3(t *testing.T) func(Catalog, bool, error) Catalog {
	return func(c Catalog, _ bool, err error) Catalog {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	c := scenario(t)
	// A second location on another provider key: a query without a location
	// then matches two stable channels.
	fsn := testImage("F", 9)
	fsn.Location = "fsn1"
	c = must[Catalog](t)(Publish(c, fsn))
	c = promote(t, c, ChannelStable, "F")
	fsnKey := testKey
	fsnKey.Location = "fsn1"
	deprecatedCandidate := must3(t)(Deprecate(c, "D", "kernel regression", t0))

	tests := []struct {
		name    string
		c       Catalog
		q       Query
		want    string
		wantErr error
		mention []string
	}{
		{"exact key", c, Query{ChannelStable, testKey}, "B", nil, nil},
		{"other location", c, Query{ChannelStable, fsnKey}, "F", nil, nil},
		{"candidate", c, Query{ChannelCandidate, testKey}, "D", nil, nil},
		{"wildcard location matches two", c, Query{ChannelStable, Key{OS: "ubuntu-2404", K8sMinor: "1.34", Arch: "amd64", Provider: "hcloud", Location: Any}},
			"", ErrAmbiguous, []string{"B (prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1604)", "F (prebake-ubuntu-2404-k8s-1-34-2-amd64-20261201t0004)"}},
		{"wildcard matching one image", c, Query{ChannelCandidate, Key{OS: Any, K8sMinor: Any, Arch: "amd64", Provider: Any, Location: Any}}, "D", nil, nil},
		{"no such channel", c, Query{"beta", testKey}, "", ErrNotFound, []string{"runtime install"}},
		{"other k8s minor", c, Query{ChannelStable, Key{OS: "ubuntu-2404", K8sMinor: "1.35", Arch: "amd64", Provider: "hcloud"}}, "", ErrNotFound, nil},
		{"other arch", c, Query{ChannelStable, Key{OS: "ubuntu-2404", K8sMinor: "1.34", Arch: "arm64", Provider: "hcloud"}}, "", ErrNotFound, nil},
		{"deprecated", deprecatedCandidate, Query{ChannelCandidate, testKey}, "", ErrDeprecated, []string{"kernel regression", "roll the channel back"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Resolve(tt.c, tt.q)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("Resolve = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
			var re *ResolveError
			if err != nil && !errors.As(err, &re) {
				t.Fatalf("error %T is not a *ResolveError", err)
			}
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

func TestPublishRefuses(t *testing.T) {
	t.Parallel()
	c := must[Catalog](t)(Publish(Catalog{}, testImage("A", 0)))
	sameName := testImage("A2", 0)
	badName := testImage("Z", 1)
	badName.Name = "ubuntu-latest"
	badManifest := testImage("M", 2)
	badManifest.Manifest.Components["kubelet"] = "latest"
	badHash := testImage("H", 3)
	badHash.InputsHash = "sha256:abc"
	tests := map[string]Image{"same id": testImage("A", 1), "same name": sameName, "bad name": badName, "bad manifest": badManifest, "bad inputs hash": badHash}
	for what, im := range tests {
		if _, err := Publish(c, im); err == nil {
			t.Errorf("Publish with %s succeeded", what)
		}
	}
}

func TestFindByInputs(t *testing.T) {
	t.Parallel()
	c := scenario(t)
	a := testImage("A", 0)
	if im, ok := c.FindByInputs(testKey, a.InputsHash); !ok || im.ID != "A" {
		t.Errorf("FindByInputs = %v, %v; want A", im.ID, ok)
	}
	other := testKey
	other.Arch = "arm64"
	if _, ok := c.FindByInputs(other, a.InputsHash); ok {
		t.Error("FindByInputs matched another key")
	}
	c = must3(t)(Deprecate(c, "A", "old", t0))
	if _, ok := c.FindByInputs(testKey, a.InputsHash); ok {
		t.Error("FindByInputs matched a deprecated image, so a rebuild would be skipped")
	}
}
