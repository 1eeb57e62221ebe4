package imagecatalog_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
)

// TestBuildReportShape: the report bootstrap's builder writes (bootstrap.BuildReport) decodes
// into imagecatalog.Report field for field, with no field left over, and the two packages
// name the same hygiene checks. bootstrap is a leaf and repeats the shape; this keeps the
// copies equal. The sandboxed build (build_system_test.go) decodes a real report file.
func TestBuildReportShape(t *testing.T) {
	t.Parallel()
	written := bootstrap.BuildReport{
		Status: "failed",
		Observed: bootstrap.Manifest{
			Components: map[string]string{"socat": "1.7.4.4-2", "cri-tools": "sha256-0123456789ab"},
			Sysctls:    map[string]string{"net.ipv4.ip_forward": "1"},
			Modules:    []string{"br_netfilter", "overlay"}, UnattendedUpgradesDisabled: true,
			ContainerImages: map[string]string{"registry.k8s.io/pause:3.10": "sha256:" + strings.Repeat("a", 64)},
		},
		Hygiene: map[string]bool{"machine-id": false, "apt-cache": true},
	}
	data, err := json.Marshal(written)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var got imagecatalog.Report
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("imagecatalog.Report cannot take %s: %v", data, err)
	}
	want := imagecatalog.Report{
		Status: "failed",
		Observed: imagecatalog.Manifest{
			Components: written.Observed.Components, Sysctls: written.Observed.Sysctls,
			Modules: written.Observed.Modules, UnattendedUpgradesDisabled: true,
			ContainerImages: written.Observed.ContainerImages,
		},
		Hygiene: written.Hygiene,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded report (-want +got):\n%s", diff)
	}
	// And back: what imagecatalog would write, bootstrap reads strictly.
	back, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bootstrap.ParseBuildReport(back); err != nil {
		t.Errorf("bootstrap cannot read imagecatalog.Report's JSON: %v", err)
	}
	if diff := cmp.Diff(imagecatalog.HygieneChecks, bootstrap.BuilderHygieneChecks); diff != "" {
		t.Errorf("hygiene checks (-imagecatalog +bootstrap builder):\n%s", diff)
	}
}
