package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/prebake-dev/prebake/providers"
)

// Defaults of the static provider; docs/configuration.md lists the same.
const (
	defaultStaticNamespace      = "prebake-static"
	defaultStaticUser           = "root"
	defaultStaticPort           = 22
	defaultStaticReset          = "kubeadm reset -f && rm -rf /etc/cni/net.d /var/lib/cni /etc/prebake"
	defaultStaticConnectTimeout = 10 * time.Second
	defaultStaticCommandTimeout = 30 * time.Minute
	defaultStaticDrainTimeout   = 5 * time.Minute
)

// StaticProvider is a pool of existing machines reached over SSH. Scale-up
// claims a free machine and runs the node script on it; scale-down drains,
// resets and frees it. The claims live in the target cluster as Leases.
type StaticProvider struct {
	// Kubeconfig is the target cluster, where the claims live and whose
	// Nodes are drained. Empty means $KUBECONFIG, then the in-cluster config.
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace holds the claims (one Lease per claimed machine). Every
	// replica, and every cluster sharing the pool, must use the same one.
	Namespace string `yaml:"namespace"`
	// PrivateKey is the SSH client key (unencrypted, PEM or OpenSSH), from a
	// file or an environment variable.
	PrivateKey SecretRef `yaml:"privateKey"`
	// KnownHosts is the known_hosts file that holds every machine's host
	// key. Required: host keys are always checked.
	KnownHosts string `yaml:"knownHosts"`
	// User and Port are the defaults for machines that set none.
	User string `yaml:"user"`
	Port int    `yaml:"port"`
	// ResetCommand runs (as root) before a machine returns to the pool.
	ResetCommand string `yaml:"resetCommand"`
	// ConnectTimeout bounds the TCP connect and SSH handshake;
	// CommandTimeout one whole script; DrainTimeout cordon and eviction.
	ConnectTimeout Duration `yaml:"connectTimeout"`
	CommandTimeout Duration `yaml:"commandTimeout"`
	DrainTimeout   Duration `yaml:"drainTimeout"`
	// MachineTypes declares what the machines are: a pool can't be asked,
	// so scale-from-zero templates use these numbers.
	MachineTypes []MachineType `yaml:"machineTypes"`
	// Machines is the pool.
	Machines []StaticMachine `yaml:"machines"`
}

// StaticMachine is one machine of the pool.
type StaticMachine struct {
	// Host names the machine: its providerID is static://<host>. A lowercase
	// DNS-1123 subdomain, unique in the pool.
	Host string `yaml:"host"`
	// Address is what SSH dials; empty means host.
	Address string `yaml:"address"`
	// Port and User override the provider's defaults.
	Port int    `yaml:"port"`
	User string `yaml:"user"`
	// MachineType names one of machineTypes.
	MachineType string `yaml:"machineType"`
	// Zone is the machine's location; a group takes machines of its own
	// location, or of none.
	Zone string `yaml:"zone"`
	// Group reserves the machine for one node group; empty means any static
	// group of its machine type and zone.
	Group string `yaml:"group"`
	// Labels are node labels of this machine only, handed to the node
	// script (PREBAKE_NODE_LABELS). CA's scale-from-zero templates don't
	// see them: put labels pods select on in the group's labels.
	Labels map[string]string `yaml:"labels"`
}

// MachineTypeList returns the declared machine types as provider values.
func (s StaticProvider) MachineTypeList() []providers.MachineType {
	return machineTypeList(s.MachineTypes)
}

func (c *Config) applyStaticDefaults(set map[string]bool) {
	const p = "providers.static"
	s := c.Providers.Static
	if s == nil {
		return
	}
	unset := func(path string) bool { return !set[path] }
	if unset(p + ".namespace") {
		s.Namespace = defaultStaticNamespace
	}
	if unset(p + ".user") {
		s.User = defaultStaticUser
	}
	if unset(p + ".port") {
		s.Port = defaultStaticPort
	}
	if unset(p + ".resetCommand") {
		s.ResetCommand = defaultStaticReset
	}
	if unset(p + ".connectTimeout") {
		s.ConnectTimeout.Duration = defaultStaticConnectTimeout
	}
	if unset(p + ".commandTimeout") {
		s.CommandTimeout.Duration = defaultStaticCommandTimeout
	}
	if unset(p + ".drainTimeout") {
		s.DrainTimeout.Duration = defaultStaticDrainTimeout
	}
	for i := range s.MachineTypes {
		if unset(p + ".machineTypes[" + strconv.Itoa(i) + "].arch") {
			s.MachineTypes[i].Arch = defaultArch
		}
	}
	for i := range s.Machines {
		m := &s.Machines[i]
		if m.User == "" {
			m.User = s.User
		}
		if m.Port == 0 {
			m.Port = s.Port
		}
	}
}

func (v *validator) static(s *StaticProvider) {
	const p = "providers.static"
	v.dnsLabel(p+".namespace", s.Namespace, "a valid namespace name")
	switch k := s.PrivateKey; {
	case k.File == "" && k.Env == "":
		v.errorf(p+".privateKey", "%s.privateKey is required: set file (a path) or env (a variable name), such as \"privateKey: {file: /etc/prebake/ssh/id_ed25519}\"", p)
	case k.File != "" && k.Env != "":
		v.errorf(p+".privateKey", "%s.privateKey: set either file or env, not both", p)
	}
	if s.KnownHosts == "" {
		v.errorf(p+".knownHosts", "%s.knownHosts is required: host keys are always checked; collect them with `ssh-keyscan -p PORT ADDRESS >> known_hosts` and verify them", p)
	}
	if s.User == "" {
		v.errorf(p+".user", "%s.user is empty; name the SSH user, or leave the key out for %q", p, defaultStaticUser)
	}
	if s.Port < 1 || s.Port > 65535 {
		v.errorf(p+".port", "%s.port is %d; use 1 to 65535 (default %d)", p, s.Port, defaultStaticPort)
	}
	if strings.TrimSpace(s.ResetCommand) == "" {
		v.errorf(p+".resetCommand", "%s.resetCommand is empty; give the command that undoes a join, or leave the key out for %q", p, defaultStaticReset)
	}
	for _, t := range []struct {
		key string
		d   Duration
	}{{"connectTimeout", s.ConnectTimeout}, {"commandTimeout", s.CommandTimeout}, {"drainTimeout", s.DrainTimeout}} {
		if t.d.Duration <= 0 {
			v.errorf(p+"."+t.key, "%s.%s is %s; it must be more than 0", p, t.key, t.d)
		}
	}

	if len(s.MachineTypes) == 0 {
		v.errorf(p+".machineTypes", "%s.machineTypes is empty; declare each kind of machine in the pool with its cpu and memory, such as \"- {name: metal-16c, cpu: \\\"16\\\", memory: 64Gi}\"", p)
	}
	types := v.machineTypes(p+".machineTypes", s.MachineTypes, "metal-16c")

	if len(s.Machines) == 0 {
		v.errorf(p+".machines", "%s.machines is empty; list the pool's machines, each with host and machineType", p)
	}
	staticGroups := map[string]bool{}
	for _, g := range v.c.NodeGroups {
		if g.Provider == "static" {
			staticGroups[g.ID] = true
		}
	}
	firstHost := map[string]int{}
	for i, m := range s.Machines {
		mp := joinIndex(p+".machines", i)
		switch {
		case m.Host == "":
			v.errorf(mp+".host", "%s: host is required: the machine's name, such as \"rack1-node07\" (its providerID is static://<host>)", mp)
		default:
			if msgs := validation.IsDNS1123Subdomain(m.Host); len(msgs) > 0 {
				v.errorf(mp+".host", "%s: host %q is not a lowercase DNS-1123 subdomain: %s; put an IPv6 or other address in address and a name here", mp, short(m.Host), strings.Join(msgs, "; "))
			} else if j, dup := firstHost[m.Host]; dup {
				v.errorf(mp+".host", "%s: host %q is also %s; hosts must be unique", mp, short(m.Host), joinIndex(p+".machines", j))
			} else {
				firstHost[m.Host] = i
			}
		}
		if m.Address != "" && strings.ContainsAny(m.Address, " /@") {
			v.errorf(mp+".address", "%s: address %q is not a host name or IP address", mp, short(m.Address))
		}
		if m.Port < 1 || m.Port > 65535 {
			v.errorf(mp+".port", "%s: port is %d; use 1 to 65535, or leave it out for providers.static.port", mp, m.Port)
		}
		switch {
		case m.MachineType == "":
			v.errorf(mp+".machineType", "%s: machineType is required; name one of %s.machineTypes", mp, p)
		case !types[m.MachineType] && len(types) > 0:
			v.errorf(mp+".machineType", "%s: machineType %q is not in %s.machineTypes%s", mp, short(m.MachineType), p, didYouMean(m.MachineType, types))
		}
		if m.Zone != "" {
			v.labelValue(mp+".zone", m.Zone)
		}
		for _, key := range sortedKeys(m.Labels) {
			lp := joinKey(mp+".labels", key)
			switch {
			case len(content.IsLabelKey(key)) > 0:
				v.errorf(lp, "%s: label key %q is not valid: %s", mp, short(key), strings.Join(content.IsLabelKey(key), "; "))
			case strings.HasPrefix(key, "prebake.dev/") || slices.Contains(prebakeLabels, key) || key == v.c.GPULabel:
				v.errorf(lp, "%s: label %q is set by prebake; remove it from labels", mp, short(key))
			case len(content.IsLabelValue(m.Labels[key])) > 0:
				v.errorf(lp, "%s: label %s: value %q is not valid: %s", mp, short(key), short(m.Labels[key]), strings.Join(content.IsLabelValue(m.Labels[key]), "; "))
			}
		}
		if m.Group != "" && !staticGroups[m.Group] {
			v.errorf(mp+".group", "%s: group %q is not a node group of the static provider; name one, or leave group out", mp, short(m.Group))
		}
	}
	for i, g := range v.c.NodeGroups {
		if g.Provider == "static" && g.Image.Channel != "" {
			v.errorf(joinIndex("nodeGroups", i)+".image.channel", "%s: a static machine can't boot an image; remove image.channel (static nodes install at runtime)", groupName(i, g.ID))
		}
	}
}

func didYouMean(name string, set map[string]bool) string {
	names := sortedKeys(set)
	if s := suggest(name, names); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return "; have: " + strings.Join(names, ", ")
}
