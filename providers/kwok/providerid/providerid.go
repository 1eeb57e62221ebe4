// Package providerid formats and parses the kwok provider's providerIDs,
// "kwok://<node-name>". It is the one home of that format.
//
// Invariant: for every id Parse accepts, Format(name) == id; for every
// valid node name, Parse(Format(name)) returns it unchanged.
package providerid

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Prefix starts every kwok providerID.
const Prefix = "kwok://"

// Format returns the providerID of the Node named name. It does not
// validate name; Parse does.
func Format(name string) string {
	return Prefix + name
}

// Parse returns the node name in a kwok providerID. The name must be a
// DNS-1123 subdomain, as every Node name is.
func Parse(id string) (string, error) {
	name, ok := strings.CutPrefix(id, Prefix)
	if !ok {
		return "", fmt.Errorf("providerID %q is not a kwok providerID: want %q followed by a node name", id, Prefix)
	}
	if name == "" {
		return "", fmt.Errorf("providerID %q has an empty node name: want %q followed by a node name", id, Prefix)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("providerID %q: node name %q is not a valid DNS-1123 subdomain: %s", id, name, strings.Join(errs, "; "))
	}
	return name, nil
}
