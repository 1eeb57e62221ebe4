package config

import (
	"strings"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/providers"
)

func TestParseWarmPool(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(base+"    warmPool: {size: 2}\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if size, state := c.NodeGroups[0].WarmPoolSpec(); size != 2 || state != providers.StandbyStopped {
		t.Errorf("WarmPoolSpec = %d %q, want 2 stopped (the default state)", size, state)
	}
	if got := c.NodeGroups[0].WarmingTimeout(); got != 10*time.Minute {
		t.Errorf("WarmingTimeout = %s, want the default 10m", got)
	}
	c, err = Parse([]byte(base+"    warmPool: {size: 1, state: suspended, warmingTimeout: 4m30s}\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if size, state := c.NodeGroups[0].WarmPoolSpec(); size != 1 || state != providers.StandbySuspended {
		t.Errorf("WarmPoolSpec = %d %q, want 1 suspended", size, state)
	}
	if got := c.NodeGroups[0].WarmingTimeout(); got != 270*time.Second {
		t.Errorf("WarmingTimeout = %s, want 4m30s as written", got)
	}
	plain, err := Parse([]byte(base), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if size, state := plain.NodeGroups[0].WarmPoolSpec(); size != 0 || state != "" || plain.NodeGroups[0].WarmingTimeout() != 0 {
		t.Errorf("a group without warmPool: %d %q %s", size, state, plain.NodeGroups[0].WarmingTimeout())
	}
}

func TestParseWarmPoolErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"negative", base + "    warmPool: {size: -1}\n", `test.yaml:13: node group "small": warmPool.size -1 is negative`},
		{"above maxSize", base + "    warmPool: {size: 11}\n", `node group "small": warmPool.size 11 is more than maxSize 10: standbys count toward maxSize`},
		{"unknown state", base + "    warmPool: {size: 1, state: hibernated}\n", `node group "small": warmPool.state "hibernated" is not a standby state; use stopped or suspended`},
		{"zero warmingTimeout", base + "    warmPool: {size: 1, warmingTimeout: 0s}\n",
			`test.yaml:13: node group "small": warmPool.warmingTimeout is 0s; it must be more than 0 (default 10m0s)`},
		{"negative warmingTimeout", base + "    warmPool: {size: 1, warmingTimeout: -5m}\n", `node group "small": warmPool.warmingTimeout is -5m0s; it must be more than 0`},
		{"warmingTimeout without unit", base + "    warmPool: {size: 1, warmingTimeout: 600}\n", `duration "600" has no unit`},
		{"unknown field", base + "    warmPool: {size: 1, ttl: 1h}\n", `unknown field "ttl"`},
		{"userDataFile", base + "    userDataFile: /dev/null\n    warmPool: {size: 1}\n", `node group "small": warmPool needs the user-data prebake renders, and userDataFile replaces it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.in), "test.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestCheckWarmPools: whether a provider can park machines is what it
// declares; the config asks, and names the group and the field.
func TestCheckWarmPools(t *testing.T) {
	t.Parallel()
	in := base + "    warmPool: {size: 2}\n" +
		"  - {id: cold, provider: kwok, maxSize: 3, machineType: kwok-small, location: zone-a, warmPool: {size: 1, state: suspended}}\n" +
		"  - {id: none, provider: kwok, maxSize: 3, machineType: kwok-small, location: zone-a, warmPool: {size: 0}}\n"
	c, err := Parse([]byte(in), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	declares := func(states ...providers.StandbyState) func(string) (providers.Capabilities, bool) {
		return func(name string) (providers.Capabilities, bool) {
			return providers.Capabilities{Standby: states}, name == "kwok"
		}
	}
	err = c.CheckWarmPools(declares())
	if err == nil {
		t.Fatal("warm pools on a provider that parks nothing passed")
	}
	for _, want := range []string{
		`test.yaml:13: node group "small": nodeGroups[0].warmPool: provider kwok can't keep standbys stopped (it declares no standby state, so it can't park machines)`,
		`test.yaml:14: node group "cold": nodeGroups[1].warmPool: provider kwok can't keep standbys suspended`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"none"`) {
		t.Errorf("a warmPool of size 0 is refused: %v", err)
	}
	err = c.CheckWarmPools(declares(providers.StandbyStopped))
	if err == nil || strings.Contains(err.Error(), `"small"`) ||
		!strings.Contains(err.Error(), `node group "cold": nodeGroups[1].warmPool: provider kwok can't keep standbys suspended (it parks machines stopped only)`) {
		t.Errorf("CheckWarmPools with stopped declared = %v, want only cold refused", err)
	}
	if err := c.CheckWarmPools(declares(providers.StandbyStopped, providers.StandbySuspended)); err != nil {
		t.Errorf("CheckWarmPools with both states declared = %v", err)
	}
}

// A Hetzner standby is joined over SSH: a warmPool on an hcloud group
// without providers.hcloud.standbySSHKey names the group, the field and
// the fix; with the key it passes.
func TestHcloudWarmPoolNeedsTheStandbyKey(t *testing.T) {
	t.Parallel()
	in := strings.Replace(base, "  kwok: {}\n", "  kwok: {}\n  hcloud: {token: {env: HCLOUD_TOKEN}}\n", 1) +
		"  - {id: hot, provider: hcloud, maxSize: 3, machineType: cx22, location: fsn1, warmPool: {size: 1}}\n" +
		"  - {id: cold, provider: hcloud, maxSize: 3, machineType: cx22, location: fsn1, warmPool: {size: 0}}\n"
	_, err := Parse([]byte(in), "test.yaml")
	want := `test.yaml:14: node group "hot": nodeGroups[1].warmPool: the hcloud provider runs a standby's join over SSH and has no key to log in with; set providers.hcloud.standbySSHKey`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Parse = %v, want an error with %q", err, want)
	}
	if strings.Contains(err.Error(), `"cold"`) || strings.Contains(err.Error(), `"small"`) {
		t.Errorf("groups without an hcloud pool are refused too: %v", err)
	}
	keyed := strings.Replace(in, "hcloud: {token: {env: HCLOUD_TOKEN}}", "hcloud: {token: {env: HCLOUD_TOKEN}, standbySSHKey: {file: /etc/prebake/standby-ssh/key}}", 1)
	if _, err := Parse([]byte(keyed), "test.yaml"); err != nil {
		t.Errorf("an hcloud pool with standbySSHKey: %v", err)
	}
}
