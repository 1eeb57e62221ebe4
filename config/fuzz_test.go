package config

import (
	"os"
	"strings"
	"testing"
)

// FuzzParse: parsing never panics; a config that decodes can be validated
// without a panic; a config that parses validates again and feeds the
// helpers; every error line starts with the source.
func FuzzParse(f *testing.F) {
	f.Add([]byte(base))
	if example, err := os.ReadFile("../examples/kwok.yaml"); err == nil {
		f.Add(example)
	}
	for _, s := range []string{
		"",
		"---\n",
		base + "---\nkind: x\n",
		base + "    labels: &l {a: *l}\n",
		base + "  - <<: [3, [4]]\n",
		base + "  - &g {id: g, provider: kwok, maxSize: 1, machineType: m, location: z}\n  - {<<: *g, id: h}\n",
		base + "workers: {qps: .inf, burst: -1, parallelism: 1e3}\nkubeReserved: {cpu: 9e30, memory: -1Ei}\n",
		base + "    taints: [~, {key: a, effect: NoSchedule}]\n    labels: {? [a] : b}\n",
		strings.Replace(base, "kwok: {}", "kwok: {machineTypes: [{name: kwok-small, cpu: 0.0001, memory: 1}], capacity: {a: -1}}", 1),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decode(data, "fuzz.yaml")
		if err != nil {
			if c != nil {
				t.Fatal("decode returned a config with its error")
			}
			checkErrorLines(t, err)
			return
		}
		verr := c.Validate()

		c, err = Parse(data, "fuzz.yaml")
		if (err == nil) != (verr == nil) {
			t.Fatalf("Parse error %v, but decode+Validate error %v", err, verr)
		}
		if err != nil {
			checkErrorLines(t, err)
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("a parsed config fails Validate: %v", err)
		}
		_ = c.Reserved()
		for _, g := range c.NodeGroups {
			_ = g.Taints()
		}
		if c.Providers.Kwok != nil {
			_ = c.Providers.Kwok.MachineTypeList()
		}
	})
}

func checkErrorLines(t *testing.T, err error) {
	t.Helper()
	for _, line := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(line, "fuzz.yaml") {
			t.Fatalf("error line %q does not start with the source; whole error:\n%v", line, err)
		}
	}
}
