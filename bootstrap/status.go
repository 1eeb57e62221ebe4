package bootstrap

import (
	"encoding/json"
	"fmt"
	"time"
)

// Status is the report the node script writes to Options.StatusPath after each phase. The
// plugin reads it (over SSH for static machines) to tell a prebaked boot from a runtime
// install and to see where the time went.
type Status struct {
	Version  int    `json:"version"`
	Provider string `json:"provider"`
	Node     string `json:"node"`
	// Result is running, ok or failed.
	Result string `json:"result"`
	// Prebaked is true when the image carried a manifest.
	Prebaked       bool     `json:"prebaked"`
	Installed      []string `json:"installed"`
	AlreadyPresent []string `json:"alreadyPresent"`
	TotalMs        int64    `json:"totalMs"`
	Phases         []Phase  `json:"phases"`
	// Error names the failed phase and what to do; "" unless Result is failed.
	Error string `json:"error"`
}

// Phase is one timed step: manifest, plan, install, configure, kubelet or join.
type Phase struct {
	Name   string `json:"name"`
	Ms     int64  `json:"ms"`
	Result string `json:"result"` // ok, skipped or failed
	Detail string `json:"detail"`
}

// Duration is how long the phase took.
func (p Phase) Duration() time.Duration { return time.Duration(p.Ms) * time.Millisecond }

// Phase returns the named phase, if the script got to it.
func (s Status) Phase(name string) (Phase, bool) {
	for _, p := range s.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return Phase{}, false
}

// ParseStatus decodes a status file.
func ParseStatus(data []byte) (Status, error) {
	var s Status
	if err := json.Unmarshal(data, &s); err != nil {
		return Status{}, fmt.Errorf("bootstrap status: %w", err)
	}
	if s.Version != 1 {
		return Status{}, fmt.Errorf("bootstrap status: version %d, want 1 (a newer node script? upgrade prebake)", s.Version)
	}
	return s, nil
}

// Manifest is the image manifest the script reads from ManifestPath and writes after a
// runtime install. Its JSON is imagecatalog.Manifest's; bootstrap is a leaf package and does
// not import imagecatalog, so the shape is repeated here and tested against a literal.
type Manifest struct {
	Components                 map[string]string `json:"components"`
	Sysctls                    map[string]string `json:"sysctls,omitempty"`
	Modules                    []string          `json:"modules,omitempty"`
	UnattendedUpgradesDisabled bool              `json:"unattendedUpgradesDisabled"`
}

// ParseManifest decodes an image manifest file.
func ParseManifest(data []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("image manifest %s: %w", ManifestPath, err)
	}
	return m, nil
}
