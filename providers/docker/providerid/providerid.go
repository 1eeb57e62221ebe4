// Package providerid formats and parses the docker provider's providerIDs,
// "docker://<container name>". It is the one home of that format.
//
// Invariant: for every id Parse accepts, Format(Parse(id)) == id; for every
// name Valid accepts, Parse(Format(name)) returns name.
package providerid

import (
	"fmt"
	"regexp"
	"strings"
)

// Prefix starts every docker providerID.
const Prefix = "docker://"

// MaxNameLen bounds a container name. The engine has no limit of its own;
// this keeps providerIDs (and the Node's spec.providerID) readable.
const MaxNameLen = 253

// namePattern is the Docker Engine's rule for container names (a leading
// "/" aside, which the engine adds itself).
var namePattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// Format returns the providerID of the container named name. It does not
// validate name; Parse does.
func Format(name string) string { return Prefix + name }

// Parse returns the container name in a docker providerID.
func Parse(id string) (string, error) {
	name, ok := strings.CutPrefix(id, Prefix)
	if !ok {
		return "", fmt.Errorf("providerID %q is not a docker providerID: want %q followed by a container name", id, Prefix)
	}
	if err := Valid(name); err != nil {
		return "", fmt.Errorf("providerID %q: %w", id, err)
	}
	return name, nil
}

// Valid reports whether name can be a container name: what the engine
// accepts ([a-zA-Z0-9][a-zA-Z0-9_.-]+), at most MaxNameLen characters.
func Valid(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("container name is empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("container name %q is %d characters long; at most %d", name[:32]+"…", len(name), MaxNameLen)
	case !namePattern.MatchString(name):
		return fmt.Errorf("container name %q is not a Docker container name: two or more of [a-zA-Z0-9_.-], starting with a letter or digit", name)
	}
	return nil
}
