package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// base is a minimal valid config. Its node group spans lines 7 to 12, so a
// case can append group fields (at 4 spaces) or top-level fields (at 0)
// from line 13 on.
const base = `apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: demo
providers:
  kwok: {}
nodeGroups:
  - id: small
    provider: kwok
    minSize: 0
    maxSize: 10
    machineType: kwok-small
    location: zone-a
`

// edit returns base with each old replaced by new; old must occur.
func edit(t *testing.T, pairs ...string) string {
	t.Helper()
	s := base
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("edit: %q is not in base", pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

func q(s string) Quantity { return Quantity{resource.MustParse(s)} }

func d(v time.Duration) Duration { return Duration{v} }

var ignoreUnexported = cmpopts.IgnoreUnexported(Config{})

// defaulted returns the Config base parses to: base plus every default.
func defaulted() *Config {
	return &Config{
		APIVersion:      APIVersion,
		Kind:            Kind,
		ClusterName:     "demo",
		RefreshInterval: d(10 * time.Second),
		KubeReserved:    Resources{CPU: q("100m"), Memory: q("256Mi")},
		GPULabel:        "prebake.dev/gpu",
		Workers:         Workers{Parallelism: 8, QPS: 20, Burst: 40, Retries: 3},
		Providers: Providers{Kwok: &KwokProvider{
			Namespace:     "prebake-kwok",
			SimulatedBoot: SimulatedBoot{Prebaked: d(20 * time.Second), RuntimeInstall: d(90 * time.Second)},
		}},
		NodeGroups: []NodeGroup{{
			ID: "small", Provider: "kwok", MinSize: 0, MaxSize: 10,
			MachineType: "kwok-small", Location: "zone-a",
		}},
	}
}

func TestParseValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want func(c *Config)
	}{
		{name: "minimal config gets every default", in: base, want: func(*Config) {}},
		{
			name: "every field set",
			in: `apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: prod-eu
refreshInterval: 1m30s
kubeReserved: {cpu: 250m, memory: 1Gi}
gpuLabel: example.com/gpu
workers: {parallelism: 4, qps: 2.5, burst: 7, retries: 5}
providers:
  kwok:
    kubeconfig: /etc/kube/config
    namespace: sim
    simulatedBoot: {prebaked: 2s, runtimeInstall: 500ms}
    machineTypes:
      - {name: gpu-1, cpu: "16", memory: 64Gi, ephemeralStorage: 100Gi, pods: 50, gpus: 2, gpuType: a100, arch: arm64, pricePerHour: 2.5}
    capacity: {zone-b: 0, zone-c: 3}
nodeGroups:
  - id: gpu-a
    provider: kwok
    minSize: 1
    maxSize: 3
    machineType: gpu-1
    location: zone-c
    region: region-1
    labels: {team: a, example.com/tier: gold}
    taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}, {key: dedicated, effect: NoExecute}]
    image: {channel: stable}
`,
			want: func(c *Config) {
				*c = Config{
					APIVersion:      APIVersion,
					Kind:            Kind,
					ClusterName:     "prod-eu",
					RefreshInterval: d(90 * time.Second),
					KubeReserved:    Resources{CPU: q("250m"), Memory: q("1Gi")},
					GPULabel:        "example.com/gpu",
					Workers:         Workers{Parallelism: 4, QPS: 2.5, Burst: 7, Retries: 5},
					Providers: Providers{Kwok: &KwokProvider{
						Kubeconfig:    "/etc/kube/config",
						Namespace:     "sim",
						SimulatedBoot: SimulatedBoot{Prebaked: d(2 * time.Second), RuntimeInstall: d(500 * time.Millisecond)},
						MachineTypes: []MachineType{{
							Name: "gpu-1", CPU: q("16"), Memory: q("64Gi"), EphemeralStorage: q("100Gi"),
							Pods: 50, GPUs: 2, GPUType: "a100", Arch: "arm64", PricePerHour: 2.5,
						}},
						Capacity: map[string]int{"zone-b": 0, "zone-c": 3},
					}},
					NodeGroups: []NodeGroup{{
						ID: "gpu-a", Provider: "kwok", MinSize: 1, MaxSize: 3, MachineType: "gpu-1",
						Location: "zone-c", Region: "region-1",
						Labels: map[string]string{"team": "a", "example.com/tier": "gold"},
						TaintSpecs: []Taint{
							{Key: "nvidia.com/gpu", Value: "true", Effect: "NoSchedule"},
							{Key: "dedicated", Effect: "NoExecute"},
						},
						Image: Image{Channel: "stable"},
					}},
				}
			},
		},
		{
			name: "written zeros are kept, not defaulted",
			in: base + `kubeReserved: {cpu: "0", memory: "0"}
workers: {retries: 0}
`,
			want: func(c *Config) {
				c.KubeReserved = Resources{CPU: q("0"), Memory: q("0")}
				c.Workers.Retries = 0
			},
		},
		{
			name: "zero simulated boot is allowed",
			in:   edit(t, "kwok: {}", "kwok: {simulatedBoot: {prebaked: 0s, runtimeInstall: 0s}}"),
			want: func(c *Config) { c.Providers.Kwok.SimulatedBoot = SimulatedBoot{} },
		},
		{
			name: "null values get defaults, and a null provider is configured",
			in:   edit(t, "kwok: {}", "kwok:") + "workers: {retries: ~, qps: null}\nrefreshInterval:\n",
			want: func(*Config) {},
		},
		{
			name: "burst defaults to two seconds of qps",
			in:   base + "workers: {qps: 2.2}\n",
			want: func(c *Config) { c.Workers.QPS, c.Workers.Burst = 2.2, 5 },
		},
		{
			name: "machine type arch defaults to amd64",
			in:   edit(t, "kwok: {}", "kwok: {machineTypes: [{name: kwok-small, cpu: 1, memory: 1Gi}]}"),
			want: func(c *Config) {
				c.Providers.Kwok.MachineTypes = []MachineType{{Name: "kwok-small", CPU: q("1"), Memory: q("1Gi"), Arch: "amd64"}}
			},
		},
		{
			name: "anchors, aliases and merge keys",
			in: base + `  - &big
    id: big
    provider: kwok
    maxSize: 5
    machineType: kwok-small
    location: zone-a
    labels: &labels {team: a}
  - <<: *big
    id: big-b
    location: zone-b
    taints: [{key: team, value: a, effect: NoSchedule}]
`,
			want: func(c *Config) {
				c.NodeGroups = append(c.NodeGroups,
					NodeGroup{ID: "big", Provider: "kwok", MaxSize: 5, MachineType: "kwok-small", Location: "zone-a",
						Labels: map[string]string{"team": "a"}},
					NodeGroup{ID: "big-b", Provider: "kwok", MaxSize: 5, MachineType: "kwok-small", Location: "zone-b",
						Labels: map[string]string{"team": "a"}, TaintSpecs: []Taint{{Key: "team", Value: "a", Effect: "NoSchedule"}}})
			},
		},
		{
			name: "hcloud with every field",
			in: edit(t, "kwok: {}", `kwok: {}
  hcloud:
    token: {file: /etc/prebake/hcloud-token}
    endpoint: http://127.0.0.1:8080/v1
    image: debian-12
    networks: [11]
    firewalls: [12, 13]
    sshKeys: [14]
    placementGroup: 15
    standbySSHKey: {file: /etc/prebake/standby-ssh/key}
    standbySSHAddress: private`),
			want: func(c *Config) {
				c.Providers.Hcloud = &HcloudProvider{
					Token: SecretRef{File: "/etc/prebake/hcloud-token"}, Endpoint: "http://127.0.0.1:8080/v1", Image: "debian-12",
					Networks: []int64{11}, Firewalls: []int64{12, 13}, SSHKeys: []int64{14}, PlacementGroup: 15,
					StandbySSHKey: SecretRef{File: "/etc/prebake/standby-ssh/key"}, StandbySSHAddress: StandbySSHPrivate,
				}
			},
		},
		{
			name: "hcloud image defaults",
			in:   edit(t, "kwok: {}", "kwok: {}\n  hcloud: {token: {env: HCLOUD_TOKEN}}"),
			want: func(c *Config) {
				c.Providers.Hcloud = &HcloudProvider{Token: SecretRef{Env: "HCLOUD_TOKEN"}, Image: "ubuntu-24.04", StandbySSHAddress: StandbySSHPublic}
			},
		},
		{
			name: "a trailing document separator is fine",
			in:   base + "---\n# nothing more\n",
			want: func(*Config) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse([]byte(tt.in), "test.yaml")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := defaulted()
			tt.want(want)
			if diff := cmp.Diff(want, got, ignoreUnexported); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	first, err := Load("../examples/kwok.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Parse(out, "marshalled.yaml")
	if err != nil {
		t.Fatalf("Parse(Marshal(config)): %v\n%s", err, out)
	}
	// Marshal writes nil maps and slices as empty ones.
	if diff := cmp.Diff(first, second, ignoreUnexported, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip (-first +second):\n%s", diff)
	}
}

// TestParseErrors checks that every error names the source, the line and
// the field. want holds substrings of the error; a case whose want has one
// entry starting with "test.yaml:" and no others must match the whole error.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	group2 := func(id string) string {
		return "  - {id: " + id + ", provider: kwok, maxSize: 1, machineType: kwok-small, location: zone-a}\n"
	}
	withTypes := func(types string) string {
		return edit(t, "kwok: {}", "kwok:\n    machineTypes:\n"+types)
	}
	tests := []struct {
		name  string
		in    string
		exact string   // the whole error, when set
		want  []string // substrings of the error
		count int      // number of errors (lines), when set
	}{
		// Decoding.
		{
			name:  "unknown field with a case-insensitive suggestion",
			in:    edit(t, "maxSize: 10", "maxsize: 10"),
			exact: `test.yaml:10: unknown field "maxsize" in node group "small" (did you mean "maxSize"?)`,
		},
		{
			name:  "unknown top-level field with an edit-distance suggestion",
			in:    base + "nodeGroup: []\n",
			exact: `test.yaml:13: unknown field "nodeGroup" at the top level (did you mean "nodeGroups"?)`,
		},
		{
			name: "unknown field without a close match lists the known ones",
			in:   base + "    colour: red\n",
			want: []string{`test.yaml:13: unknown field "colour" in node group "small" (known fields: id, provider, minSize, maxSize`},
		},
		{
			name:  "unknown nested field",
			in:    base + "    taints: [{key: a, efect: NoSchedule}]\n",
			exact: `test.yaml:13: unknown field "efect" in node group "small" at taints[0] (did you mean "effect"?)`,
		},
		{
			name:  "an unknown provider lists hcloud",
			in:    edit(t, "kwok: {}", "kwok: {}\n  openstack: {}"),
			exact: `test.yaml:6: unknown field "openstack" in providers (available providers: kwok, hcloud, gce, static, docker)`,
		},
		{
			name:  "hcloud token inline is refused",
			in:    edit(t, "kwok: {}", "kwok: {}\n  hcloud: {token: abc123}"),
			want:  []string{`test.yaml:6:`},
			count: 1,
		},
		{
			name: "hcloud fields",
			in: edit(t, "kwok: {}", `kwok: {}
  hcloud:
    token: {}
    endpoint: "ftp://x"
    image: ""
    networks: [0]
    placementGroup: -1`),
			want: []string{
				`test.yaml:7: providers.hcloud.token is required: set file (a path) or env (a variable name)`,
				`test.yaml:8: providers.hcloud.endpoint "ftp://x" is not an http(s) URL`,
				`test.yaml:9: providers.hcloud.image is empty`,
				`test.yaml:10: providers.hcloud.networks[0] is 0; use the resource's numeric id`,
				`test.yaml:11: providers.hcloud.placementGroup is -1`,
			},
			count: 5,
		},
		{
			name: "hcloud standby SSH fields",
			in: edit(t, "kwok: {}", `kwok: {}
  hcloud:
    token: {env: T}
    standbySSHKey: {file: /k, env: K}
    standbySSHAddress: tailnet`),
			want: []string{
				`test.yaml:8: providers.hcloud.standbySSHKey: set either file or env, not both`,
				`test.yaml:9: providers.hcloud.standbySSHAddress "tailnet": use public (a standby's public IPv4) or private`,
			},
			count: 2,
		},
		{
			name:  "hcloud standby SSH on a private address without networks",
			in:    edit(t, "kwok: {}", "kwok: {}\n  hcloud: {token: {env: T}, standbySSHAddress: private}"),
			exact: `test.yaml:6: providers.hcloud.standbySSHAddress is private, but no networks are set, so standbys have no private address; add the network prebake runs in to providers.hcloud.networks, or use public`,
		},
		{
			name:  "hcloud token with file and env",
			in:    edit(t, "kwok: {}", "kwok: {}\n  hcloud: {token: {file: /t, env: T}}"),
			exact: `test.yaml:6: providers.hcloud.token: set either file or env, not both`,
		},
		{
			name:  "a misspelt provider",
			in:    edit(t, "kwok: {}", "kwk: {}"),
			exact: `test.yaml:5: unknown field "kwk" in providers (did you mean "kwok"?)`,
		},
		{
			name:  "a word where a number goes",
			in:    edit(t, "maxSize: 10", "maxSize: ten"),
			exact: `test.yaml:10: node group "small": maxSize: want a whole number, got "ten"`,
		},
		{
			name:  "a quoted number",
			in:    edit(t, "maxSize: 10", `maxSize: "10"`),
			exact: `test.yaml:10: node group "small": maxSize: want a whole number, got "10"; remove the quotes`,
		},
		{
			name:  "a list where a string goes",
			in:    edit(t, "location: zone-a", "location: [zone-a]"),
			exact: `test.yaml:12: node group "small": location: want a string, got a list`,
		},
		{
			name:  "a scalar where a mapping goes",
			in:    base + "workers: 8\n",
			exact: `test.yaml:13: workers: want a mapping (key: value), got "8"`,
		},
		{
			name:  "a mapping where a list goes",
			in:    base + "    taints: {key: a}\n",
			exact: `test.yaml:13: node group "small": taints: want a list, got a mapping`,
		},
		{
			name:  "a duration without a unit",
			in:    base + "refreshInterval: 20\n",
			exact: `test.yaml:13: refreshInterval: duration "20" has no unit; write it with one, such as "20s"`,
		},
		{
			name: "an invalid duration",
			in:   edit(t, "kwok: {}", "kwok: {simulatedBoot: {prebaked: soon}}"),
			want: []string{`test.yaml:5: providers.kwok.simulatedBoot.prebaked: invalid duration "soon"`, `"20s"`},
		},
		{
			name: "an invalid quantity",
			in:   base + "kubeReserved: {cpu: 100m, memory: 1GB}\n",
			want: []string{`test.yaml:13: kubeReserved.memory: invalid quantity "1GB"`, "4Gi, not 4GB"},
		},
		{
			name:  "a key set twice",
			in:    base + "    maxSize: 5\n",
			exact: `test.yaml:13: "maxSize" is set twice in node group "small" (first on line 10); keep one`,
		},
		{
			name: "all decoding errors at once",
			in:   edit(t, "maxSize: 10", "maxsize: 10") + "workers: {parallelism: x}\nrefreshInterval: 3\n",
			want: []string{
				`test.yaml:10: unknown field "maxsize"`,
				`test.yaml:13: workers.parallelism: want a whole number, got "x"`,
				`test.yaml:14: refreshInterval: duration "3" has no unit`,
			},
			count: 3,
		},
		{
			name:  "an alias inside its own anchor",
			in:    base + "  - &g {<<: *g, id: x}\n",
			exact: `test.yaml:13: node group "x": alias *g is used inside its own anchor; YAML can't expand that`,
		},
		{
			name:  "a merge of a scalar",
			in:    base + "  - <<: 3\n",
			exact: `test.yaml:13: nodeGroups[1]: a "<<" merge takes a mapping or a list of mappings, got "3"`,
		},
		{
			name: "a second document",
			in:   base + "---\nclusterName: other\n",
			want: []string{"test.yaml:13: a second YAML document starts here", "single document"},
		},
		{name: "an empty file", in: "", want: []string{"test.yaml: the config is empty", "apiVersion: prebake.dev/v1alpha1"}},
		{name: "only comments", in: "# nothing\n", want: []string{"test.yaml: the config is empty"}},
		{name: "an empty document", in: "---\n", want: []string{"test.yaml: the config is empty"}},
		{name: "a YAML syntax error", in: "apiVersion: prebake.dev/v1alpha1\nkind: [\n", want: []string{"test.yaml:", "invalid YAML: "}},
		{name: "a list, not a mapping", in: "- a\n", exact: "test.yaml:1: the config must be a mapping of fields (apiVersion: ..., kind: ..., ...), got a list"},
		{
			name:  "a wrong apiVersion hides the other errors",
			in:    edit(t, "prebake.dev/v1alpha1", "prebake.dev/v1", "maxSize", "maxsize"),
			exact: `test.yaml:1: apiVersion "prebake.dev/v1" is not supported by this build; set "apiVersion: prebake.dev/v1alpha1"`,
		},
		{
			name:  "a wrong kind",
			in:    edit(t, "kind: ProviderConfig", "kind: Config"),
			exact: `test.yaml:2: kind "Config" is not supported by this build; set "kind: ProviderConfig"`,
		},
		{
			name: "a missing apiVersion",
			in:   edit(t, "apiVersion: prebake.dev/v1alpha1\n", "apiversion: prebake.dev/v1alpha1\n"),
			want: []string{
				`test.yaml:1: apiVersion is missing; add "apiVersion: prebake.dev/v1alpha1"`,
				`test.yaml:1: unknown field "apiversion" at the top level (did you mean "apiVersion"?)`,
			},
			count: 2,
		},

		// Validation.
		{
			name:  "maxSize below minSize",
			in:    edit(t, "minSize: 0", "minSize: 5", "maxSize: 10", "maxSize: 3"),
			exact: `test.yaml:10: node group "small": maxSize 3 < minSize 5; raise maxSize or lower minSize`,
		},
		{name: "maxSize 0", in: edit(t, "maxSize: 10", "maxSize: 0"), exact: `test.yaml:10: node group "small": maxSize is 0; it must be at least 1`},
		{name: "maxSize over 1000", in: edit(t, "maxSize: 10", "maxSize: 1001"), want: []string{`test.yaml:10: node group "small": maxSize 1001 is more than 1000`}},
		{name: "negative minSize", in: edit(t, "minSize: 0", "minSize: -1"), want: []string{`test.yaml:9: node group "small": minSize -1 is negative`}},
		{name: "empty id", in: edit(t, "id: small", `id: ""`), want: []string{`test.yaml:7: nodeGroups[0]: id is required`}},
		{name: "id not a DNS label", in: edit(t, "id: small", "id: Small_1"), want: []string{`test.yaml:7: node group "Small_1": id "Small_1" is not a DNS label`}},
		{
			name: "id too long",
			in:   edit(t, "id: small", "id: "+strings.Repeat("a", 41)),
			want: []string{"test.yaml:7: ", "id is 41 characters long; use at most 40"},
		},
		{
			name:  "duplicate id",
			in:    base + group2("small"),
			exact: `test.yaml:13: node group "small": id is also used by nodeGroups[0] (line 7); ids must be unique`,
		},
		{name: "missing provider", in: edit(t, "provider: kwok", `provider: ""`), want: []string{`test.yaml:8: node group "small": provider is required; set one of the configured providers (kwok)`}},
		{name: "unknown provider", in: edit(t, "provider: kwok", "provider: kowk"), want: []string{`test.yaml:8: node group "small": unknown provider "kowk" (did you mean "kwok"?)`}},
		{name: "provider known but not configured", in: edit(t, "provider: kwok", "provider: gce"), want: []string{`test.yaml:8: node group "small": provider "gce" is not configured; add it under providers`}},
		{
			name: "machine type not in the configured list",
			in:   edit(t, "kwok: {}", "kwok: {machineTypes: [{name: kwok-small, cpu: 1, memory: 1Gi}]}", "machineType: kwok-small", "machineType: kwok-smal"),
			want: []string{`test.yaml:11: node group "small": machineType "kwok-smal" is not in providers.kwok.machineTypes (did you mean "kwok-small"?); have: kwok-small`},
		},
		{name: "missing machine type", in: edit(t, "machineType: kwok-small", `machineType: ""`), want: []string{`test.yaml:11: node group "small": machineType is required`}},
		{name: "missing location", in: edit(t, "    location: zone-a\n", ""), want: []string{`test.yaml:7: node group "small": location is required; set the zone`}},
		{name: "location not a label value", in: edit(t, "location: zone-a", `location: "zone a"`), want: []string{`test.yaml:12: node group "small": location "zone a" is not a valid label value`}},
		{name: "bad label key", in: base + "    labels: {bad key: x}\n", want: []string{`test.yaml:13: node group "small": label key "bad key" is not valid: name part must consist of`}},
		{name: "bad label value", in: base + "    labels: {team: a b}\n", want: []string{`test.yaml:13: node group "small": label team: value "a b" is not valid`}},
		{
			name: "label set by prebake",
			in:   base + "    labels:\n      team: a\n      topology.kubernetes.io/zone: x\n",
			want: []string{`test.yaml:15: node group "small": label "topology.kubernetes.io/zone" is set by prebake; remove it from labels`},
		},
		{name: "prebake.dev label", in: base + "    labels: {prebake.dev/group: x}\n", want: []string{`test.yaml:13: node group "small": label "prebake.dev/group" is set by prebake`}},
		{
			name: "bad taint effect",
			in:   base + "    taints:\n      - {key: a, effect: NoSchedule}\n      - {key: b, effect: Never}\n",
			want: []string{`test.yaml:15: node group "small": taints[1].effect is "Never"; use NoSchedule, PreferNoSchedule or NoExecute`},
		},
		{name: "taint without key", in: base + "    taints: [{effect: NoSchedule}]\n", want: []string{`test.yaml:13: node group "small": taints[0].key is required`}},
		{
			name: "repeated taint",
			in:   base + "    taints: [{key: a, effect: NoSchedule}, {key: a, value: b, effect: NoSchedule}]\n",
			want: []string{`test.yaml:13: node group "small": taints[1] repeats taints[0] (key "a", effect NoSchedule)`},
		},
		{name: "bad image channel", in: base + "    image: {channel: Stable!}\n", want: []string{`test.yaml:13: node group "small": image.channel "Stable!" is not a channel name`}},
		{name: "bad image os", in: base + "    image: {channel: stable, os: Ubuntu 24.04}\n", want: []string{`test.yaml:13: node group "small": image.os "Ubuntu 24.04" is not an OS release; write it as the image names do, such as "ubuntu-2404"`}},
		{name: "bad image k8sMinor", in: base + "    image: {channel: stable, k8sMinor: v1.35.4}\n", want: []string{`test.yaml:13: node group "small": image.k8sMinor "v1.35.4" is not a Kubernetes minor; write it as "1.35"`}},
		{name: "image os without channel", in: base + "    image: {os: ubuntu-2404}\n", want: []string{`test.yaml:13: node group "small": image.os and image.k8sMinor narrow a channel; set image.channel too`}},
		{
			name: "bad container images",
			in:   base + "    image:\n      channel: stable\n      containerImages:\n        - registry.k8s.io/pause:3.10\n        - busybox:1.36\n        - registry.k8s.io/pause:3.10\n",
			want: []string{
				`test.yaml:17: node group "small": image.containerImages[1]: "busybox:1.36" is not a fully qualified image reference`,
				`test.yaml:18: node group "small": image.containerImages[2]: "registry.k8s.io/pause:3.10" is listed twice (also [0]); list each image once`,
			},
		},
		{
			name: "container images without channel", in: base + "    image: {containerImages: [registry.k8s.io/pause:3.10]}\n",
			want: []string{`test.yaml:13: node group "small": image.containerImages say which images the channel's image should hold; set image.channel too`},
		},
		{name: "image catalog configMap without namespace", in: base + "imageCatalog: {configMap: prebake-images}\n", want: []string{`test.yaml:13: imageCatalog.configMap "prebake-images": write it as NAMESPACE/NAME`}},
		{name: "image catalog file and configMap", in: base + "imageCatalog: {file: " + os.Args[0] + ", configMap: kube-system/x}\n", want: []string{`test.yaml:13: imageCatalog sets both file and configMap; keep one`}},
		{name: "missing image catalog", in: base + "imageCatalog: {file: /nonexistent/catalog.yaml}\n", want: []string{`test.yaml:13: imageCatalog.file "/nonexistent/catalog.yaml" can't be read (no such file or directory)`}},
		{
			name: "missing userDataFile",
			in:   base + "    userDataFile: /nonexistent/user-data\n",
			want: []string{`test.yaml:13: node group "small": userDataFile "/nonexistent/user-data" can't be read (no such file or directory)`},
		},
		{name: "userDataFile is a directory", in: base + "    userDataFile: " + os.TempDir() + "\n", want: []string{`test.yaml:13: node group "small": userDataFile`, "is not a regular file"}},
		{
			name:  "missing clusterName is reported where the config starts",
			in:    edit(t, "clusterName: demo\n", ""),
			exact: `test.yaml:1: clusterName is required; set it to a DNS label such as "demo" (it is the value of the prebake.dev/cluster label on everything prebake creates)`,
		},
		{name: "clusterName not a DNS label", in: edit(t, "clusterName: demo", "clusterName: Demo"), want: []string{`test.yaml:3: clusterName "Demo" is not a DNS label`}},
		{name: "zero refreshInterval", in: base + "refreshInterval: 0s\n", want: []string{"test.yaml:13: refreshInterval is 0s; it must be more than 0 (default 10s)"}},
		{name: "negative kubeReserved", in: base + "kubeReserved: {cpu: -1}\n", want: []string{"test.yaml:13: kubeReserved.cpu is -1; it must be 0 or more"}},
		{name: "empty gpuLabel", in: base + "gpuLabel: \"\"\n", want: []string{`test.yaml:13: gpuLabel is empty; set a label key, or leave it out for the default "prebake.dev/gpu"`}},
		{name: "bad gpuLabel", in: base + "gpuLabel: a/b/c\n", want: []string{`test.yaml:13: gpuLabel "a/b/c" is not a valid label key`}},
		{
			name: "workers out of range",
			in:   base + "workers:\n  parallelism: 0\n  qps: .nan\n  burst: 0\n  retries: 11\n",
			want: []string{
				"test.yaml:14: workers.parallelism is 0; use 1 to 256 (default 8)",
				"test.yaml:15: workers.qps is NaN; use a number of API calls per second above 0 and at most 10000 (default 20)",
				"test.yaml:16: workers.burst is 0; use 1 to 100000",
				"test.yaml:17: workers.retries is 11; use 0 to 10 (default 3)",
			},
			count: 4,
		},
		{
			name: "no provider",
			in:   edit(t, "providers:\n  kwok: {}\n", "providers: {}\n"),
			want: []string{
				`test.yaml:4: no provider is configured; add one under providers, such as "kwok: {}" (available: kwok, hcloud, gce, static, docker)`,
				`test.yaml:7: node group "small": provider "kwok" is not configured; add it under providers`,
			},
			count: 2,
		},
		{name: "no node groups", in: edit(t, base[strings.Index(base, "nodeGroups:"):], "nodeGroups: []\n"), exact: "test.yaml:6: no node groups; add at least one under nodeGroups (see examples/kwok.yaml)"},
		{name: "bad kwok namespace", in: edit(t, "kwok: {}", "kwok: {namespace: Sim}"), want: []string{`test.yaml:5: providers.kwok.namespace "Sim" is not a valid namespace name`}},
		{
			name: "negative simulated boot",
			in:   edit(t, "kwok: {}", "kwok:\n    simulatedBoot:\n      runtimeInstall: -1s"),
			want: []string{"test.yaml:7: providers.kwok.simulatedBoot.runtimeInstall is -1s; use 0s or more"},
		},
		{
			name: "empty machine type list",
			in:   edit(t, "kwok: {}", "kwok: {machineTypes: []}"),
			want: []string{"test.yaml:5: providers.kwok.machineTypes is empty; list at least one machine type, or leave the key out"},
		},
		{
			name: "bad machine types",
			in: withTypes(`      - {name: kwok-small, cpu: "0", memory: 1Gi, arch: sparc, pods: -1, gpus: -1, pricePerHour: -1}
      - {cpu: 1}
      - {name: kwok-small, cpu: 20k, memory: 2Pi}
`),
			want: []string{
				`test.yaml:7: providers.kwok.machineTypes[0].cpu is 0; it must be more than 0, such as "2"`,
				"test.yaml:7: providers.kwok.machineTypes[0].pods is -1; use 1 to 10000, or 0 for the kubelet default of 110",
				"test.yaml:7: providers.kwok.machineTypes[0].gpus is -1",
				`test.yaml:7: providers.kwok.machineTypes[0].arch is "sparc"; use amd64 or arm64`,
				"test.yaml:7: providers.kwok.machineTypes[0].pricePerHour is -1",
				`test.yaml:8: providers.kwok.machineTypes[1]: name is required`,
				`test.yaml:8: providers.kwok.machineTypes[1].memory is 0; it must be more than 0, such as "4Gi"`,
				`test.yaml:9: providers.kwok.machineTypes[2]: machine type "kwok-small" is also defined by providers.kwok.machineTypes[0]`,
				"test.yaml:9: providers.kwok.machineTypes[2].cpu is 20k; it must be at most 10k",
				"test.yaml:9: providers.kwok.machineTypes[2].memory is 2Pi; it must be at most 1Pi",
			},
			count: 10,
		},
		{
			name: "negative capacity",
			in:   edit(t, "kwok: {}", "kwok:\n    capacity:\n      zone-b: -1\n      zone c: 1"),
			want: []string{
				"test.yaml:7: providers.kwok.capacity.zone-b is -1; use 0 (simulated stockout) or more",
				`test.yaml:8: providers.kwok.capacity["zone c"] "zone c" is not a valid label value`,
			},
			count: 2,
		},
		{
			name: "validation reports every problem",
			in: edit(t, "maxSize: 10", "maxSize: 0", "clusterName: demo", "clusterName: Demo") +
				"    taints: [{key: a, effect: Nope}]\n" + group2("small"),
			want: []string{
				`test.yaml:3: clusterName "Demo"`,
				`test.yaml:10: node group "small": maxSize is 0`,
				`test.yaml:13: node group "small": taints[0].effect is "Nope"`,
				`test.yaml:14: node group "small": id is also used by nodeGroups[0]`,
			},
			count: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tt.in), "test.yaml")
			if err == nil {
				t.Fatalf("Parse succeeded, want an error; config:\n%s", tt.in)
			}
			if c != nil {
				t.Errorf("Parse returned a config with its error")
			}
			msg := err.Error()
			if tt.exact != "" && msg != tt.exact {
				t.Errorf("error:\n got %s\nwant %s", msg, tt.exact)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q; got:\n%s", w, msg)
				}
			}
			if got := len(strings.Split(msg, "\n")); tt.count > 0 && got != tt.count {
				t.Errorf("got %d errors, want %d:\n%s", got, tt.count, msg)
			}
			for _, line := range strings.Split(msg, "\n") {
				if !strings.HasPrefix(line, "test.yaml") {
					t.Errorf("error line does not start with the source: %q", line)
				}
			}
		})
	}
}

func TestValidateConfigBuiltInCode(t *testing.T) {
	t.Parallel()
	c := defaulted()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(defaulted config): %v", err)
	}
	c.NodeGroups[0].MaxSize = -1
	err := c.Validate()
	want := `node group "small": maxSize is -1; it must be at least 1`
	if err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %q (no source, no line)", err, want)
	}
	if err := (*Config)(nil).Validate(); err == nil {
		t.Error("Validate on nil *Config: want an error")
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "user-data.yaml"), []byte("#cloud-config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := base + "    userDataFile: user-data.yaml\n"
	path := filepath.Join(dir, "prebake.yaml")
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}

	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := c.NodeGroups[0].UserDataFile, filepath.Join(dir, "user-data.yaml"); got != want {
		t.Errorf("userDataFile = %q, want %q (relative to the config file)", got, want)
	}

	// Parse has no directory: the same path is relative to the working
	// directory, where the file is not.
	if _, err := Parse([]byte(in), path); err == nil || !strings.Contains(err.Error(), path+`:13: node group "small": userDataFile "user-data.yaml"`) {
		t.Errorf("Parse = %v, want an error about userDataFile at line 13", err)
	}

	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %v, want an error naming the path", err)
	}
}

// TestExamples keeps every example valid; examples/kwok.yaml is also held to
// the kwok provider config, docs/configuration.md.
func TestExamples(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no examples found in ../examples")
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte("\nkind: ImageCatalog\n")) {
				// An image catalog that an example config points to.
				c, _, err := imagecatalog.Unmarshal(path, data)
				if err == nil {
					err = c.Validate()
				}
				if err != nil {
					t.Errorf("catalog %s:\n%v", path, err)
				}
				return
			}
			if _, err := Load(path); err != nil {
				t.Errorf("Load(%s):\n%v", path, err)
			}
		})
	}

	t.Run("kwok.yaml is the README default", func(t *testing.T) {
		t.Parallel()
		c, err := Load("../examples/kwok.yaml")
		if err != nil {
			t.Fatal(err)
		}
		g := c.NodeGroups[0]
		if g.MinSize != 0 || len(g.TaintSpecs) != 0 || g.Provider != "kwok" {
			t.Errorf("first group: minSize %d, %d taints, provider %q; want 0, none, kwok", g.MinSize, len(g.TaintSpecs), g.Provider)
		}
		var mt *providers.MachineType
		for _, m := range c.Providers.Kwok.MachineTypeList() {
			if m.Name == g.MachineType {
				mt = &m
			}
		}
		if mt == nil {
			t.Fatalf("first group's machine type %q is not in the example's machineTypes", g.MachineType)
		}
		_, alloc := providers.Capacity(*mt, c.Reserved())
		cpu, mem := alloc["cpu"], alloc["memory"]
		if cpu.Cmp(resource.MustParse("500m")) < 0 || mem.Cmp(resource.MustParse("256Mi")) < 0 {
			t.Errorf("first group's allocatable is %s CPU / %s memory; want room for a 500m / 256Mi pod", cpu.String(), mem.String())
		}

		stockout := false
		for _, g := range c.NodeGroups {
			if n, ok := c.Providers.Kwok.Capacity[g.Location]; ok && n == 0 {
				stockout = true
			}
		}
		if !stockout {
			t.Error("no group is in a zone with capacity 0 (the failover demo)")
		}

		// The first group boots prebaked: its channel resolves in the
		// example's catalog.
		cat, _, err := imagecatalog.FileStore{Path: c.ImageCatalog.File}.Load(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		q := imagecatalog.Query{Channel: g.Image.Channel, Key: imagecatalog.Key{
			OS: imagecatalog.Any, K8sMinor: imagecatalog.Any, Arch: mt.Arch, Provider: g.Provider, Location: imagecatalog.Any}}
		if _, err := imagecatalog.Resolve(cat, q); err != nil {
			t.Errorf("first group's channel does not resolve in %s: %v", c.ImageCatalog.File, err)
		}
	})
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(edit(t, "kwok: {}", "kwok: {machineTypes: [{name: kwok-small, cpu: 1500m, memory: 2Gi, ephemeralStorage: 10Gi, gpus: 1, gpuType: t4, pricePerHour: 0.5}]}")+
		"    taints: [{key: a, value: b, effect: NoSchedule}]\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Taints", func(t *testing.T) {
		t.Parallel()
		want := []providers.Taint{{Key: "a", Value: "b", Effect: "NoSchedule"}}
		if diff := cmp.Diff(want, c.NodeGroups[0].Taints()); diff != "" {
			t.Errorf("Taints (-want +got):\n%s", diff)
		}
		if got := (NodeGroup{}).Taints(); got != nil {
			t.Errorf("Taints of a group without taints = %v, want nil", got)
		}
	})
	t.Run("MachineTypeList", func(t *testing.T) {
		t.Parallel()
		want := []providers.MachineType{{
			Name: "kwok-small", MilliCPU: 1500, MemoryBytes: 2 << 30, EphemeralStorageBytes: 10 << 30,
			GPUs: 1, GPUType: "t4", Arch: "amd64", PricePerHour: 0.5,
		}}
		if diff := cmp.Diff(want, c.Providers.Kwok.MachineTypeList()); diff != "" {
			t.Errorf("MachineTypeList (-want +got):\n%s", diff)
		}
		if got := (KwokProvider{}).MachineTypeList(); got != nil {
			t.Errorf("MachineTypeList without machineTypes = %v, want nil", got)
		}
	})
	t.Run("Reserved", func(t *testing.T) {
		t.Parallel()
		want := providers.Reserved{MilliCPU: 100, MemoryBytes: 256 << 20}
		if diff := cmp.Diff(want, c.Reserved()); diff != "" {
			t.Errorf("Reserved (-want +got):\n%s", diff)
		}
	})
	t.Run("Names", func(t *testing.T) {
		t.Parallel()
		if diff := cmp.Diff([]string{"kwok"}, c.Providers.Names()); diff != "" {
			t.Errorf("Names (-want +got):\n%s", diff)
		}
		if got := (Providers{}).Names(); got != nil {
			t.Errorf("Names of no providers = %v, want nil", got)
		}
	})
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	known := []string{"id", "provider", "minSize", "maxSize", "machineType", "labels", "taints"}
	tests := []struct{ in, want string }{
		{"maxsize", "maxSize"},
		{"MACHINETYPE", "machineType"},
		{"provder", "provider"},
		{"lables", "labels"},
		{"taint", "taints"},
		{"ID", "id"},
		{"provdier", "provider"},
		{"x", ""},
		{"colour", ""},
		{strings.Repeat("a", 100), ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			if got := suggest(tt.in, known); got != tt.want {
				t.Errorf("suggest(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	t.Parallel()
	lines := map[string]int{"": 1, "nodeGroups": 6, "nodeGroups[1]": 20, `nodeGroups[1].labels["a.b/c"]`: 22}
	tests := []struct {
		path   string
		parent string
		line   int
	}{
		{`nodeGroups[1].labels["a.b/c"]`, "nodeGroups[1].labels", 22},
		{`nodeGroups[1].labels["x[\"y"]`, "nodeGroups[1].labels", 20},
		{"nodeGroups[1].taints[0].effect", "nodeGroups[1].taints[0]", 20},
		{"nodeGroups[1]", "nodeGroups", 20},
		{"nodeGroups[3]", "nodeGroups", 6},
		{"workers.qps", "workers", 1},
		{"workers", "", 1},
		{"", "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			if got := parentPath(tt.path); got != tt.parent {
				t.Errorf("parentPath(%q) = %q, want %q", tt.path, got, tt.parent)
			}
			if got := lineOf(lines, tt.path); got != tt.line {
				t.Errorf("lineOf(%q) = %d, want %d", tt.path, got, tt.line)
			}
		})
	}
	if got, want := joinKey("labels", `x["y`), `labels["x[\"y"]`; got != want {
		t.Errorf("joinKey = %q, want %q", got, want)
	}
}
