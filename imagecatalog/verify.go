package imagecatalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Report is a builder's verification report: what it observed in the image
// it built, and the hygiene checks. Its JSON is the file bootstrap's builder
// script writes (bootstrap.BuildReport, bootstrap.BuildReportPath).
type Report struct {
	// Status is "done", or "failed" when the builder's install failed.
	Status string `json:"status"`
	// Observed is the manifest as the builder found it installed
	// (dpkg-query, --version, and for the container images `ctr images ls`),
	// never the requested one.
	Observed Manifest `json:"observed"`
	// Hygiene maps each check in HygieneChecks to whether it passed.
	Hygiene map[string]bool `json:"hygiene"`
}

// DecodeReport reads a builder's report strictly: an unknown field means the
// builder script and this binary disagree about the shape, and a status other
// than done or failed is no report. Every provider's transport (SSH on
// Hetzner, a guest attribute on GCE) hands its bytes here.
func DecodeReport(data []byte) (Report, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Report
	if err := dec.Decode(&r); err != nil {
		return Report{}, fmt.Errorf("builder report: %w", err)
	}
	if dec.More() {
		return Report{}, errors.New("builder report: more than one JSON value")
	}
	if r.Status != "done" && r.Status != "failed" {
		return Report{}, fmt.Errorf("builder report: status %q, want done or failed", r.Status)
	}
	return r, nil
}

// VerifyError lists everything wrong with a build, so one failed build shows
// every problem at once.
type VerifyError struct {
	Status     string
	Mismatches []Mismatch
	Hygiene    []string // failed or missing checks, each with its fix
	// ContainerImages lists the recipe's images the report lacks or holds
	// at another digest than the one they are pinned to.
	ContainerImages []string
	Manifest        error // the observed manifest is invalid
}

func (e *VerifyError) Error() string {
	var parts []string
	if e.Status != "done" {
		parts = append(parts, fmt.Sprintf("the builder reported %q: its install script failed; see its console log", e.Status))
	}
	for _, m := range e.Mismatches {
		parts = append(parts, "version "+m.String())
	}
	parts = append(parts, e.Hygiene...)
	parts = append(parts, e.ContainerImages...)
	if e.Manifest != nil {
		parts = append(parts, "observed "+e.Manifest.Error())
	}
	return "verification failed: " + strings.Join(parts, "; ")
}

// Verify checks a report against the requested manifest: every requested
// component at exactly its version, unattended-upgrades disabled, every
// hygiene check passed. It returns a *VerifyError, or nil. It checks a
// Debian or Ubuntu image: VerifyFor(FamilyDebian, ...).
func Verify(want Manifest, r Report) error { return VerifyFor(FamilyDebian, want, r) }

// VerifyFor is Verify for an image of the family: the observed manifest must
// carry what the family requires (Manifest.ValidateFor).
func VerifyFor(f Family, want Manifest, r Report) error { return verify(f, want, nil, r) }

// VerifyBuild checks a build's report against its spec: VerifyFor the
// spec's family and manifest, and every one of the spec's container images
// in the report, at the digest it is pinned to if it is (a reference by tag
// takes whatever digest the builder pulled, which the manifest records).
func VerifyBuild(s BuildSpec, r Report) error {
	return verify(s.Family(), s.Manifest(), s.ContainerImages, r)
}

func verify(f Family, want Manifest, images []string, r Report) error {
	e := &VerifyError{Status: r.Status, Mismatches: Diff(want, r.Observed)}
	for _, check := range HygieneChecks {
		passed, reported := r.Hygiene[check]
		switch {
		case !reported:
			e.Hygiene = append(e.Hygiene, fmt.Sprintf("hygiene check %s was not reported", check))
		case !passed:
			e.Hygiene = append(e.Hygiene, fmt.Sprintf("hygiene check %s failed: %s", check, hygieneFix[check]))
		}
	}
	if want.UnattendedUpgradesDisabled && !r.Observed.UnattendedUpgradesDisabled {
		e.Hygiene = append(e.Hygiene, "unattended-upgrades is enabled: mask apt-daily*.timer and unattended-upgrades.service")
	}
	for k, v := range want.Sysctls {
		if r.Observed.Sysctls[k] != v {
			e.Hygiene = append(e.Hygiene, fmt.Sprintf("sysctl %s: want %s, got %q", k, v, r.Observed.Sysctls[k]))
		}
	}
	for _, mod := range want.Modules {
		if !slices.Contains(r.Observed.Modules, mod) {
			e.Hygiene = append(e.Hygiene, fmt.Sprintf("kernel module %s is not configured to load", mod))
		}
	}
	e.ContainerImages = verifyContainerImages(images, r.Observed.ContainerImages)
	e.Manifest = r.Observed.ValidateFor(f)
	if r.Status == "done" && len(e.Mismatches) == 0 && len(e.Hygiene) == 0 && len(e.ContainerImages) == 0 && e.Manifest == nil {
		return nil
	}
	return e
}
