// Package providerid formats and parses the static provider's providerIDs,
// "static://<host>", where host is the machine's name in the pool (a
// lowercase DNS-1123 subdomain such as "rack1-node07" or "10.0.0.7"). It is
// the one home of that format.
//
// Invariant: for every id Parse accepts, Format(Parse(id)) == id; for every
// host Valid accepts, Parse(Format(host)) returns host.
package providerid

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Prefix starts every static providerID.
const Prefix = "static://"

// Format returns the providerID of the machine named host.
func Format(host string) string { return Prefix + host }

// Parse returns the host in a static providerID.
func Parse(id string) (string, error) {
	host, ok := strings.CutPrefix(id, Prefix)
	if !ok {
		return "", fmt.Errorf("providerID %q is not a static providerID: want %q followed by a machine host name", id, Prefix)
	}
	if err := Valid(host); err != nil {
		return "", fmt.Errorf("providerID %q: %w", id, err)
	}
	return host, nil
}

// Valid reports whether host can name a pool machine: a lowercase DNS-1123
// subdomain. The host also names the machine's claim (a Lease), whose name
// has the same rule.
func Valid(host string) error {
	if host == "" {
		return fmt.Errorf("machine host is empty")
	}
	if msgs := validation.IsDNS1123Subdomain(host); len(msgs) > 0 {
		return fmt.Errorf("machine host %q is not a lowercase DNS-1123 subdomain: %s", host, strings.Join(msgs, "; "))
	}
	return nil
}
