// Package providerid formats and parses the hcloud provider's providerIDs,
// "hcloud://<server-id>", the format of the Hetzner cloud-controller-manager
// and of kubelet's --provider-id on Hetzner. It is the one home of that
// format.
//
// Invariant: for every id Parse accepts, Format(n) == id; for every server id
// n > 0, Parse(Format(n)) returns n.
package providerid

import (
	"fmt"
	"strconv"
	"strings"
)

// Prefix starts every hcloud providerID.
const Prefix = "hcloud://"

// Format returns the providerID of the server with this id.
func Format(id int64) string {
	return Prefix + strconv.FormatInt(id, 10)
}

// Parse returns the server id in an hcloud providerID: a positive decimal
// number without sign or leading zeros.
func Parse(id string) (int64, error) {
	s, ok := strings.CutPrefix(id, Prefix)
	if !ok {
		return 0, fmt.Errorf("providerID %q is not an hcloud providerID: want %q followed by a server id", id, Prefix)
	}
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, fmt.Errorf("providerID %q: server id %q must be a positive number without leading zeros", id, s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("providerID %q: server id %q is not a 64-bit decimal number", id, s)
	}
	return n, nil
}
