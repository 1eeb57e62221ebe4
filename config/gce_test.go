package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const gceBase = `apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: demo
providers:
  gce:
    project: my-project
nodeGroups:
  - id: e2-a
    provider: gce
    minSize: 0
    maxSize: 10
    machineType: e2-standard-2
    location: europe-west4-a
`

func TestGceDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(gceBase), "gce.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &GceProvider{
		Project: "my-project", Image: defaultGceImage, ImageArm64: defaultGceImageArm64,
		DiskSizeGB: defaultGceDiskSizeGB, QPS: defaultGceQPS, Burst: 40,
	}
	if d := cmp.Diff(want, c.Providers.Gce); d != "" {
		t.Errorf("providers.gce (-want +got):\n%s", d)
	}
	if got := c.NodeGroups[0].Region; got != "europe-west4" {
		t.Errorf("region = %q, want the zone's region europe-west4", got)
	}
}

func TestGceErrors(t *testing.T) {
	t.Parallel()
	edit := func(pairs ...string) string {
		s := gceBase
		for i := 0; i < len(pairs); i += 2 {
			if !strings.Contains(s, pairs[i]) {
				t.Fatalf("base lacks %q", pairs[i])
			}
			s = strings.Replace(s, pairs[i], pairs[i+1], 1)
		}
		return s
	}
	tests := []struct {
		name, in, want string
	}{
		{"no project", edit("    project: my-project\n", "    endpoint: http://127.0.0.1:1\n"), `gce.yaml:5: providers.gce.project is required`},
		{"display name as project", edit("project: my-project", `project: "My Project"`), `gce.yaml:6: providers.gce.project "My Project" is not a project id`},
		{"credentials both ways", edit("project: my-project", "project: my-project\n    credentials: {file: /k.json, env: GCE_KEY}"), `gce.yaml:7: providers.gce.credentials: set either file or env, not both`},
		{"inline credentials", edit("project: my-project", "project: my-project\n    credentials: '{\"type\": \"service_account\"}'"), `gce.yaml:7: `},
		{"endpoint not a URL", edit("project: my-project", "project: my-project\n    endpoint: compute.local"), `gce.yaml:7: providers.gce.endpoint "compute.local" is not an http(s) URL`},
		{"image not a path", edit("project: my-project", "project: my-project\n    image: ubuntu-2404"), `gce.yaml:7: providers.gce.image "ubuntu-2404" is not an image path`},
		{"tiny disk", edit("project: my-project", "project: my-project\n    diskSizeGB: 5"), `gce.yaml:7: providers.gce.diskSizeGB is 5; use 10 to 65536`},
		{"unknown field", edit("project: my-project", "project: my-project\n    zone: europe-west4-a"), `gce.yaml:7: unknown field "zone"`},
		{"price without machine type", edit("project: my-project", "project: my-project\n    prices: [{pricePerHour: 0.1}]"), `providers.gce.prices[0].machineType is required`},
		{"price of zero", edit("project: my-project", "project: my-project\n    prices: [{machineType: e2-standard-2}]"), `providers.gce.prices[0].pricePerHour is 0`},
		{"price in a zone", edit("project: my-project", "project: my-project\n    prices: [{machineType: e2-standard-2, region: europe-west4-a, pricePerHour: 0.1}]"), `providers.gce.prices[0].region "europe-west4-a" is not a GCE region`},
		{"price twice", edit("project: my-project", "project: my-project\n    prices: [{machineType: e2-standard-2, pricePerHour: 0.1}, {machineType: e2-standard-2, pricePerHour: 0.2}]"), `providers.gce.prices[1] repeats providers.gce.prices[0]`},
		{"region as location", edit("location: europe-west4-a", "location: europe-west4"), `gce.yaml:13: node group "e2-a": location "europe-west4" is not a GCE zone`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.in), "gce.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
