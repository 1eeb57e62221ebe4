package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/providers"
)

// staticBase is a minimal valid static config; the pool's machines start at
// line 11.
const staticBase = `apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: demo
providers:
  static:
    privateKey: {env: SSH_KEY}
    knownHosts: /etc/prebake/known_hosts
    machineTypes:
      - {name: metal, cpu: "8", memory: 32Gi}
    machines:
      - {host: node-1, address: 10.0.0.1, machineType: metal, zone: dc1}
      - {host: node-2, port: 2222, user: admin, machineType: metal, labels: {rack: r1}, group: big}
nodeGroups:
  - {id: small, provider: static, maxSize: 2, machineType: metal, location: dc1}
  - {id: big, provider: static, maxSize: 1, machineType: metal, location: dc1}
`

func TestParseStatic(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(staticBase), "static.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &StaticProvider{
		Namespace:      "prebake-static",
		PrivateKey:     SecretRef{Env: "SSH_KEY"},
		KnownHosts:     "/etc/prebake/known_hosts",
		User:           "root",
		Port:           22,
		ResetCommand:   defaultStaticReset,
		ConnectTimeout: d(10 * time.Second),
		CommandTimeout: d(30 * time.Minute),
		DrainTimeout:   d(5 * time.Minute),
		MachineTypes:   []MachineType{{Name: "metal", CPU: q("8"), Memory: q("32Gi"), Arch: "amd64"}},
		Machines: []StaticMachine{
			{Host: "node-1", Address: "10.0.0.1", Port: 22, User: "root", MachineType: "metal", Zone: "dc1"},
			{Host: "node-2", Port: 2222, User: "admin", MachineType: "metal", Group: "big", Labels: map[string]string{"rack": "r1"}},
		},
	}
	if diff := cmp.Diff(want, c.Providers.Static); diff != "" {
		t.Errorf("providers.static (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"static"}, c.Providers.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	mts := c.Providers.Static.MachineTypeList()
	if len(mts) != 1 || mts[0] != (providers.MachineType{Name: "metal", MilliCPU: 8000, MemoryBytes: 32 << 30, Arch: "amd64"}) {
		t.Errorf("MachineTypeList = %+v", mts)
	}
}

func TestParseStaticErrors(t *testing.T) {
	t.Parallel()
	edit := func(pairs ...string) string {
		s := staticBase
		for i := 0; i+1 < len(pairs); i += 2 {
			if !strings.Contains(s, pairs[i]) {
				t.Fatalf("edit: %q is not in staticBase", pairs[i])
			}
			s = strings.Replace(s, pairs[i], pairs[i+1], 1)
		}
		return s
	}
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "no key", in: edit("    privateKey: {env: SSH_KEY}\n", ""), want: []string{"static.yaml:5: providers.static.privateKey is required"}},
		{name: "key twice", in: edit("{env: SSH_KEY}", "{env: SSH_KEY, file: /k}"), want: []string{"static.yaml:6: providers.static.privateKey: set either file or env"}},
		{name: "no known_hosts", in: edit("    knownHosts: /etc/prebake/known_hosts\n", ""), want: []string{"static.yaml:5: providers.static.knownHosts is required", "ssh-keyscan"}},
		{name: "unknown field with its line", in: edit("zone: dc1}", "zone: dc1, zon: x}"), want: []string{`static.yaml:11: unknown field "zon"`}},
		{name: "bad host", in: edit("host: node-1,", "host: Node_1,"), want: []string{"static.yaml:11: providers.static.machines[0]: host \"Node_1\" is not a lowercase DNS-1123 subdomain"}},
		{name: "duplicate host", in: edit("host: node-2,", "host: node-1,"), want: []string{"static.yaml:12:", `host "node-1" is also providers.static.machines[0]`}},
		{name: "undeclared machine type", in: edit("machineType: metal, zone", "machineType: metl, zone"), want: []string{"static.yaml:11:", `machineType "metl" is not in providers.static.machineTypes (did you mean "metal"?)`}},
		{name: "bad port", in: edit("port: 2222", "port: 70000"), want: []string{"static.yaml:12:", "port is 70000"}},
		{name: "group not static", in: edit("group: big}", "group: huge}"), want: []string{"static.yaml:12:", `group "huge" is not a node group of the static provider`}},
		{name: "empty pool", in: edit("      - {host: node-1, address: 10.0.0.1, machineType: metal, zone: dc1}\n      - {host: node-2, port: 2222, user: admin, machineType: metal, labels: {rack: r1}, group: big}\n", "", "machines:\n", "machines: []\n"), want: []string{"providers.static.machines is empty"}},
		{name: "no machine types", in: edit("      - {name: metal, cpu: \"8\", memory: 32Gi}\n", "", "machineTypes:\n", "machineTypes: []\n"), want: []string{"providers.static.machineTypes is empty"}},
		{name: "type without memory", in: edit(`{name: metal, cpu: "8", memory: 32Gi}`, `{name: metal, cpu: "8"}`), want: []string{"static.yaml:9:", "memory is 0"}},
		{name: "group machine type", in: edit("maxSize: 2, machineType: metal", "maxSize: 2, machineType: metal-xl"), want: []string{"static.yaml:14:", `machineType "metal-xl" is not in providers.static.machineTypes`}},
		{name: "machine label prebake owns", in: edit("zone: dc1}", "zone: dc1, labels: {prebake.dev/group: x}}"), want: []string{"static.yaml:11:", `label "prebake.dev/group" is set by prebake`}},
		{name: "machine label value", in: edit("zone: dc1}", "zone: dc1, labels: {rack: \"r 1\"}}"), want: []string{"static.yaml:11:", `label rack: value "r 1" is not valid`}},
		{name: "image channel", in: edit("location: dc1}\n  - {id: big", "location: dc1, image: {channel: stable}}\n  - {id: big"), want: []string{"static.yaml:14:", "can't boot an image"}},
		{name: "zero timeout", in: edit("    machineTypes:\n", "    drainTimeout: 0s\n    machineTypes:\n"), want: []string{"providers.static.drainTimeout is 0s"}},
		{name: "empty reset", in: edit("    machineTypes:\n", "    resetCommand: \"\"\n    machineTypes:\n"), want: []string{"providers.static.resetCommand is empty"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.in), "static.yaml")
			if err == nil {
				t.Fatal("Parse: nil error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q; got:\n%v", w, err)
				}
			}
		})
	}
}
