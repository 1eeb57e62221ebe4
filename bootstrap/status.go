package bootstrap

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Status is the report the node script writes to Options.StatusPath after each phase. The
// plugin reads it (over SSH for static machines) to tell a prebaked boot from a runtime
// install and to see where the time went.
type Status struct {
	Version  int    `json:"version"`
	Provider string `json:"provider"`
	Node     string `json:"node"`
	// Result is running, ok, failed, or StatusPrepared for a warm-pool standby (Options.Standby)
	// that is ready to be parked.
	Result string `json:"result"`
	// Prebaked is true when the image carried a manifest.
	Prebaked       bool     `json:"prebaked"`
	Installed      []string `json:"installed"`
	AlreadyPresent []string `json:"alreadyPresent"`
	TotalMs        int64    `json:"totalMs"`
	Phases         []Phase  `json:"phases"`
	// Error names the failed phase and what to do; "" unless Result is failed.
	Error string `json:"error"`
	// MissingImages are the container images the image's manifest lists that containerd's
	// k8s.io namespace lacked at boot (the images phase): the kubelet pulls them as usual.
	MissingImages []string `json:"missingImages,omitempty"`
}

// StatusPrepared is the Result of a warm-pool standby's script (Options.Standby) that
// installed and configured everything a node needs and stopped just before the join.
const StatusPrepared = "prepared"

// Phase is one timed step: manifest, plan, install, configure, images, standby (a standby's
// resume hook), kubelet or join.
type Phase struct {
	Name   string `json:"name"`
	Ms     int64  `json:"ms"`
	Result string `json:"result"` // ok, skipped or failed; the images phase may say missing
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
	// ContainerImages maps each container image the builder pulled into containerd's k8s.io
	// namespace (BuilderInput.Images) to its digest; the node's images phase checks them.
	ContainerImages map[string]string `json:"containerImages,omitempty"`
}

// ParseManifest decodes an image manifest file.
func ParseManifest(data []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("image manifest %s: %w", ManifestPath, err)
	}
	return m, nil
}

// NodeAnnotation is the Node annotation the node script sets once it has joined (best effort,
// with the kubelet's credentials):
//
//	prebaked=BOOL total=MSms start=UNIXMS PHASE=MSms/RESULT ...
//
// one PHASE=... word per phase in the order they ran, for example
//
//	prebaked=true total=9312ms start=1764669601123 manifest=3ms/ok plan=20ms/ok install=0ms/skipped configure=40ms/ok kubelet=5ms/ok join=9000ms/ok
//
// start is when the script began, in Unix milliseconds on the machine's own clock (scripts
// before it was added leave it out). The phases ran back to back from start, a few ms of
// bookkeeping apart. When the images phase found container images of the manifest missing,
// its result is "missing" and a last word names them:
//
//	... images=31ms/missing kubelet=5ms/ok join=9000ms/ok missing-images=registry.k8s.io/pause:3.10,registry.example/app:1.2
//
// ParseNodeAnnotation reads it; the format is stable.
const NodeAnnotation = "prebake.dev/bootstrap"

// NodeReport is what the NodeAnnotation says: a summary of the Status file.
type NodeReport struct {
	// Prebaked is true when the image carried a manifest.
	Prebaked bool
	TotalMs  int64
	// Start is when the script began on the machine's clock; zero when the report has no
	// start= word.
	Start time.Time
	// Phases are the phases' results (ok, skipped or failed) and durations, in order.
	Phases []Phase
	// MissingImages are the container images of the image's manifest that containerd lacked
	// at boot (the missing-images word); nil when none were.
	MissingImages []string
}

// Phase returns the named phase, if the script reported it.
func (r NodeReport) Phase(name string) (Phase, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return Phase{}, false
}

// RanInstall reports whether the script installed something (its install phase did not
// skip): on an image that claims to be prebaked, that means the image lacks what it should
// carry.
func (r NodeReport) RanInstall() bool {
	p, ok := r.Phase("install")
	return ok && p.Result != "skipped"
}

// ParseNodeAnnotation decodes the NodeAnnotation's value.
func ParseNodeAnnotation(value string) (NodeReport, error) {
	var r NodeReport
	bad := func(format string, args ...any) (NodeReport, error) {
		return NodeReport{}, fmt.Errorf("node annotation %s=%q: %s", NodeAnnotation, value, fmt.Sprintf(format, args...))
	}
	words := strings.Fields(value)
	if len(words) < 2 {
		return bad("want \"prebaked=BOOL total=MSms start=UNIXMS PHASE=MSms/RESULT ...\"")
	}
	switch words[0] {
	case "prebaked=true":
		r.Prebaked = true
	case "prebaked=false":
	default:
		return bad("first word %q: want prebaked=true or prebaked=false", words[0])
	}
	total, ok := strings.CutPrefix(words[1], "total=")
	if !ok {
		return bad("second word %q: want total=MSms", words[1])
	}
	var err error
	if r.TotalMs, err = parseMs(total); err != nil {
		return bad("total: %v", err)
	}
	rest := words[2:]
	if len(rest) > 0 && strings.HasPrefix(rest[0], "start=") {
		v, err := strconv.ParseInt(strings.TrimPrefix(rest[0], "start="), 10, 64)
		if err != nil || v <= 0 {
			return bad("third word %q: want start=UNIXMS, the script's start in Unix milliseconds", rest[0])
		}
		r.Start, rest = time.UnixMilli(v).UTC(), rest[1:]
	}
	for _, w := range rest {
		if list, ok := strings.CutPrefix(w, missingImagesWord); ok {
			if list == "" || slices.Contains(strings.Split(list, ","), "") {
				return bad("word %q: want %sREF,REF...", w, missingImagesWord)
			}
			r.MissingImages = strings.Split(list, ",")
			continue
		}
		name, rest, ok := strings.Cut(w, "=")
		ms, result, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 || name == "" || result == "" {
			return bad("phase %q: want PHASE=MSms/RESULT", w)
		}
		p := Phase{Name: name, Result: result}
		if p.Ms, err = parseMs(ms); err != nil {
			return bad("phase %s: %v", name, err)
		}
		r.Phases = append(r.Phases, p)
	}
	return r, nil
}

// missingImagesWord starts the NodeAnnotation word that names the missing container images.
const missingImagesWord = "missing-images="

func parseMs(s string) (int64, error) {
	n, ok := strings.CutSuffix(s, "ms")
	v, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a duration in ms such as 120ms", s)
	}
	return v, nil
}
