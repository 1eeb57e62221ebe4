package autoscaling

import (
	"maps"
	"slices"
	"testing"
)

// agree checks the index invariant: every instance is under its name and
// its providerID, and nothing else is in either map.
func agree(t *testing.T, x index, want ...*instance) {
	t.Helper()
	if len(x.byName) != len(want) || len(x.byProviderID) != len(want) {
		t.Errorf("index holds %v by name and %v by providerID, want %d each", slices.Sorted(maps.Keys(x.byName)), slices.Sorted(maps.Keys(x.byProviderID)), len(want))
	}
	for _, inst := range want {
		if x.named(inst.name) != inst || x.byID(inst.providerID) != inst {
			t.Errorf("%s (%s) is not under both its name and its providerID", inst.name, inst.providerID)
		}
	}
}

func TestIndex(t *testing.T) {
	t.Parallel()
	x := newIndex()
	a := &instance{name: "a", providerID: "prebake-placeholder://g/a", placeholder: true}
	b := &instance{name: "b", providerID: "fake://b"}
	x.add(a)
	x.add(b)
	agree(t, x, a, b)

	// The cloud's id replaces the placeholder.
	x.setProviderID(a, "hcloud://1")
	if a.placeholder || a.providerID != "hcloud://1" {
		t.Errorf("after setProviderID: %+v", a)
	}
	agree(t, x, a, b)
	if x.byID("prebake-placeholder://g/a") != nil {
		t.Error("the placeholder id still finds the instance")
	}

	// Lookups as List and CA make them.
	if x.listed("hcloud://1", "a") != a || x.listed("", "a") != a || x.listed("hcloud://9", "") != nil {
		t.Error("listed did not find by providerID, then by name")
	}
	for _, n := range []Node{{ProviderID: "fake://b"}, {Name: "b"}, {Name: "fake://b"}} {
		if x.node(n) != b {
			t.Errorf("node(%+v) did not find b", n)
		}
	}
	if x.node(Node{ProviderID: "fake://zz", Name: "zz"}) != nil {
		t.Error("node found a machine that isn't there")
	}

	// An instance that took over a name (a re-adoption) is not removed by
	// the removal of the one before it.
	a2 := &instance{name: "a", providerID: "hcloud://2"}
	x.add(a2)
	x.remove(a)
	if x.named("a") != a2 {
		t.Error("removing the old instance dropped the new one's name")
	}
	x.remove(a2)
	x.remove(b)
	agree(t, x)
}
