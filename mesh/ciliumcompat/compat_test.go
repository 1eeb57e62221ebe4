package ciliumcompat

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cilium/cilium/pkg/clustermesh/types"
	"github.com/cilium/cilium/pkg/defaults"
	ipamOption "github.com/cilium/cilium/pkg/ipam/option"

	"github.com/prebake-dev/prebake/mesh"
)

// The tests below are not parallel: Cilium keeps the id limit in a package variable,
// types.ClusterIDMax, set by InitClusterIDMax.

func TestConstants(t *testing.T) {
	for _, c := range []struct {
		what      string
		ours, cil any
	}{
		{"default maxConnectedClusters", mesh.MaxConnectedClusters255, int(defaults.MaxConnectedClusters)},
		{"extended maxConnectedClusters", mesh.MaxConnectedClusters511, types.ClusterIDExt511},
		{"ENI IPAM mode", mesh.IPAMModeENI, ipamOption.IPAMENI},
		{"AlibabaCloud IPAM mode", mesh.IPAMModeAlibabaCloud, ipamOption.IPAMAlibabaCloud},
		{"default cluster name", "default", defaults.ClusterName},
	} {
		if fmt.Sprint(c.ours) != fmt.Sprint(c.cil) {
			t.Errorf("%s: ours %v, Cilium v1.20.2 %v", c.what, c.ours, c.cil)
		}
	}
}

// ciliumAccepts is what a Cilium agent would do with the cluster: the checks of the
// agent's clustermesh cell (InitClusterIDMax, ValidateStrict, ValidateBuggyClusterID).
func ciliumAccepts(c mesh.Cluster) error {
	mc := c.MaxConnectedClusters
	if mc == 0 {
		mc = int(defaults.MaxConnectedClusters)
	}
	info := types.ClusterInfo{ID: uint32(c.ID), Name: c.Name, MaxConnectedClusters: uint32(mc)}
	defer func() { types.ClusterIDMax = defaults.MaxConnectedClusters }()
	if err := info.InitClusterIDMax(); err != nil {
		return err
	}
	if err := info.ValidateStrict(); err != nil {
		return err
	}
	return info.ValidateBuggyClusterID(c.IPAMMode, c.ChainingMode)
}

func compare(t *testing.T, c mesh.Cluster) {
	t.Helper()
	ours := mesh.Validate([]mesh.Cluster{c})
	theirs := ciliumAccepts(c)
	if (ours == nil) != (theirs == nil) {
		t.Errorf("name %q id %d maxConnectedClusters %d ipam %q chaining %q: prebake says %v, Cilium v1.20.2 says %v",
			c.Name, c.ID, c.MaxConnectedClusters, c.IPAMMode, c.ChainingMode, ours, theirs)
	}
}

func TestNames(t *testing.T) {
	names := []string{
		"", "a", "0", "-", "a-", "-a", "a-b", "a--b", "A", "aB", "a_b", "a.b", "a b", "é",
		"default", "default-1", "kube-system", "c1", "eu-west-1", "1-2-3",
		strings.Repeat("a", 31), strings.Repeat("a", 32), strings.Repeat("a", 33), strings.Repeat("a", 64),
		strings.Repeat("a-", 16), "a" + strings.Repeat("-b", 15) + "c",
	}
	// Random names over an alphabet with every character class the rules care about.
	r := rand.New(rand.NewPCG(8, 20))
	const alphabet = "ab09-_.A "
	for range 2000 {
		b := make([]byte, r.IntN(36))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		compare(t, mesh.Cluster{Name: n, ID: 1})
	}
}

func TestIDs(t *testing.T) {
	type mode struct{ ipam, chaining string }
	modes := []mode{{}, {ipamOption.IPAMENI, ""}, {ipamOption.IPAMAlibabaCloud, ""}, {"", "aws-cni"}, {ipamOption.IPAMClusterPool, "generic-veth"}}
	for _, mc := range []int{255, 511, 256, 1000} {
		for id := 0; id <= 600; id++ {
			for _, m := range modes {
				compare(t, mesh.Cluster{Name: "c", ID: id, MaxConnectedClusters: mc, IPAMMode: m.ipam, ChainingMode: m.chaining})
			}
		}
	}
}
