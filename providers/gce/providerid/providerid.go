// Package providerid formats and parses the gce provider's providerIDs,
// "gce://<project>/<zone>/<instance-name>", the format of the GCE
// cloud-controller-manager, of kubelet on GCE and of CA's in-tree GCE
// provider. It is the one home of that format.
//
// Invariant: for every id Parse accepts, Format(Parse(id)) == id; each of
// the three parts is non-empty and holds no "/", so Parse(Format(r)) == r for
// every such r.
package providerid

import (
	"fmt"
	"strings"
)

// Prefix starts every gce providerID.
const Prefix = "gce://"

// Ref names one instance.
type Ref struct {
	Project string
	Zone    string
	Name    string
}

// Format returns the providerID of the instance r names.
func Format(r Ref) string {
	return Prefix + r.Project + "/" + r.Zone + "/" + r.Name
}

// Parse splits a gce providerID into its project, zone and instance name.
func Parse(id string) (Ref, error) {
	s, ok := strings.CutPrefix(id, Prefix)
	if !ok {
		return Ref{}, fmt.Errorf("providerID %q is not a gce providerID: want %q followed by <project>/<zone>/<name>", id, Prefix)
	}
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return Ref{}, fmt.Errorf("providerID %q: want %s<project>/<zone>/<name>, got %d part(s) after the prefix", id, Prefix, len(parts))
	}
	for i, what := range []string{"project", "zone", "instance name"} {
		if parts[i] == "" {
			return Ref{}, fmt.Errorf("providerID %q: the %s is empty", id, what)
		}
		if strings.ContainsAny(parts[i], " \t\r\n") {
			return Ref{}, fmt.Errorf("providerID %q: the %s %q holds white space", id, what, parts[i])
		}
	}
	return Ref{Project: parts[0], Zone: parts[1], Name: parts[2]}, nil
}
