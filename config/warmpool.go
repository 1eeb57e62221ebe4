package config

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/prebake-dev/prebake/providers"
)

// WarmPool is a node group's pool of standby machines (docs/warm-pool.md):
// booted, bootstrapped up to just before the join, then parked, so a
// scale-up resumes one instead of creating a machine.
type WarmPool struct {
	// Size is the most standbys kept; they count toward maxSize. 0 keeps
	// none.
	Size int `yaml:"size"`
	// State is how a standby rests: stopped or suspended, one the group's
	// provider can park in. Empty means stopped.
	State string `yaml:"state"`
	// WarmingTimeout is how long a standby may stay warming (created, not
	// reported prepared yet) before it is deleted and replaced.
	WarmingTimeout Duration `yaml:"warmingTimeout"`
}

// defaultWarmingTimeout is warmPool.warmingTimeout left out: a cloud VM
// boots and runs the prepare-only script in a few minutes, so ten is a
// report that is not coming. docs/configuration.md gives the same value.
const defaultWarmingTimeout = 10 * time.Minute

// applyWarmPoolDefaults fills in each warmPool's warmingTimeout left out.
func (c *Config) applyWarmPoolDefaults(set map[string]bool) {
	for i := range c.NodeGroups {
		wp := c.NodeGroups[i].WarmPool
		if wp != nil && !set[joinIndex("nodeGroups", i)+".warmPool.warmingTimeout"] {
			wp.WarmingTimeout.Duration = defaultWarmingTimeout
		}
	}
}

// WarmPoolSpec is the group's warm pool with its default applied: the
// zero value when the group has none.
func (g NodeGroup) WarmPoolSpec() (size int, state providers.StandbyState) {
	if g.WarmPool == nil {
		return 0, ""
	}
	state = providers.StandbyState(g.WarmPool.State)
	if state == "" {
		state = providers.StandbyStopped
	}
	return g.WarmPool.Size, state
}

// WarmingTimeout is the group's warmPool.warmingTimeout, its default
// applied; 0 when the group has no warm pool.
func (g NodeGroup) WarmingTimeout() time.Duration {
	if g.WarmPool == nil {
		return 0
	}
	return g.WarmPool.WarmingTimeout.Duration
}

func standbyStateNames() string {
	var out []string
	for _, s := range providers.StandbyStates {
		out = append(out, string(s))
	}
	return strings.Join(out, " or ")
}

// groupWarmPool checks the group's warmPool block as far as the config
// knows: whether the provider can park machines is CheckWarmPools's.
func (v *validator) groupWarmPool(p, name string, g NodeGroup) {
	wp := g.WarmPool
	if wp == nil {
		return
	}
	p += ".warmPool"
	switch {
	case wp.Size < 0:
		v.errorf(p+".size", "%s: warmPool.size %d is negative; use 0 (no pool) or more", name, wp.Size)
	case wp.Size > g.MaxSize && g.MaxSize >= 1:
		v.errorf(p+".size", "%s: warmPool.size %d is more than maxSize %d: standbys count toward maxSize; lower warmPool.size", name, wp.Size, g.MaxSize)
	}
	if wp.State != "" && !slices.Contains(providers.StandbyStates, providers.StandbyState(wp.State)) {
		v.errorf(p+".state", "%s: warmPool.state %q is not a standby state; use %s (docs/warm-pool.md)", name, short(wp.State), standbyStateNames())
	}
	if wp.WarmingTimeout.Duration <= 0 {
		v.errorf(p+".warmingTimeout", "%s: warmPool.warmingTimeout is %s; it must be more than 0 (default %s): a standby still warming after it is deleted and replaced", name, wp.WarmingTimeout, defaultWarmingTimeout)
	}
	if wp.Size > 0 && g.UserDataFile != "" {
		v.errorf(p, "%s: warmPool needs the user-data prebake renders, and userDataFile replaces it: a standby is prepared by one script and joins with another; remove one of them", name)
	}
	if wp.Size > 0 && g.Provider == "hcloud" && v.c.Providers.Hcloud != nil && !v.c.Providers.Hcloud.HasStandbySSHKey() {
		// A Hetzner server's user-data is fixed at create: prebake runs a
		// standby's join over SSH, and keeps the key across restarts.
		v.errorf(p, "%s: %s: the hcloud provider runs a standby's join over SSH and has no key to log in with; set providers.hcloud.standbySSHKey (a private key from a mounted Secret, such as {file: /etc/prebake/standby-ssh/key}), or remove warmPool (docs/warm-pool.md)", name, p)
	}
}

// CheckWarmPools refuses a warm pool on a group whose provider can't park
// machines in its state. caps gives a configured provider's declared
// capabilities: the config knows providers by name only, so the composition
// root, which builds them, calls this. Each error names the group and the
// field, with its line.
func (c *Config) CheckWarmPools(caps func(provider string) (providers.Capabilities, bool)) error {
	v := &validator{c: c}
	for i, g := range c.NodeGroups {
		size, state := g.WarmPoolSpec()
		if size == 0 {
			continue
		}
		cp, ok := caps(g.Provider)
		if !ok {
			continue // an unconfigured provider is Validate's error
		}
		if cp.Parks(state) {
			continue
		}
		p := joinIndex("nodeGroups", i) + ".warmPool"
		can := "it declares no standby state, so it can't park machines"
		if len(cp.Standby) > 0 {
			var states []string
			for _, s := range cp.Standby {
				states = append(states, string(s))
			}
			can = "it parks machines " + strings.Join(states, " or ") + " only"
		}
		v.errorf(p, "%s: %s: provider %s can't keep standbys %s (%s); remove warmPool, or use a provider or state that can (docs/warm-pool.md)",
			groupName(i, g.ID), p, g.Provider, state, can)
	}
	return errors.Join(v.errs...)
}
