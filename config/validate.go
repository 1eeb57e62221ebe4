package config

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

var (
	maxCPU    = resource.MustParse(maxCPUQuantity)
	maxMemory = resource.MustParse(maxMemQuantity)
	maxDisk   = resource.MustParse(maxDiskQuantity)
)

// taintEffects are the effects a taint may have, as in core/v1.
var (
	osRelease = regexp.MustCompile(`^[a-z]+-[0-9a-z]+$`)
	k8sMinor  = regexp.MustCompile(`^[1-9][0-9]*\.(0|[1-9][0-9]*)$`)
)

var taintEffects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}

// prebakeLabels are set on every node by prebake (providers.NodeLabels);
// a group label can't override them.
var prebakeLabels = []string{
	providers.LabelHostname, providers.LabelArch, providers.LabelOS,
	providers.LabelInstanceType, providers.LabelZone, providers.LabelRegion,
}

// Validate checks the whole config and returns every problem found, joined
// (errors.Join); each names its field and, for a parsed config, its line.
// Load and Parse call it; call it again after changing a Config in code.
// It checks that userDataFile paths exist and does no other I/O.
func (c *Config) Validate() error {
	if c == nil {
		return errors.New("config: Validate called on a nil *Config")
	}
	v := &validator{c: c}
	v.top()
	v.workers()
	v.providers()
	v.nodeGroups()
	v.bootstrapBlock()
	return errors.Join(v.errs...)
}

// validator collects the errors of one Validate call.
type validator struct {
	c    *Config
	errs []error
}

// errorf reports a problem with the field at path; path gives the line.
func (v *validator) errorf(path, format string, args ...any) {
	v.errs = append(v.errs, &fieldError{
		source: v.c.source,
		line:   lineOf(v.c.lines, path),
		msg:    fmt.Sprintf(format, args...),
	})
}

func (v *validator) groupID(i int) string {
	if i >= 0 && i < len(v.c.NodeGroups) {
		return v.c.NodeGroups[i].ID
	}
	return ""
}

func (v *validator) subject(path string) string { return subject(path, v.groupID) }

// checks run a k8s validation function and report its messages.
func (v *validator) dnsLabel(path, value, what string) {
	if msgs := validation.IsDNS1123Label(value); len(msgs) > 0 {
		v.errorf(path, "%s %q is not %s: %s", v.subject(path), short(value), what, strings.Join(msgs, "; "))
	}
}

func (v *validator) labelValue(path, value string) {
	if msgs := content.IsLabelValue(value); len(msgs) > 0 {
		v.errorf(path, "%s %q is not a valid label value: %s", v.subject(path), short(value), strings.Join(msgs, "; "))
	}
}

func (v *validator) labelKey(path, value string) {
	if msgs := content.IsLabelKey(value); len(msgs) > 0 {
		v.errorf(path, "%s %q is not a valid label key: %s", v.subject(path), short(value), strings.Join(msgs, "; "))
	}
}

// quantity checks lo <= q <= hi; lo is 0 (inclusive) or positive (q > 0).
func (v *validator) quantity(path string, q Quantity, positive bool, hi resource.Quantity, example string) {
	switch {
	case positive && q.Sign() <= 0:
		v.errorf(path, "%s is %s; it must be more than 0, such as %q", v.subject(path), q.String(), example)
	case q.Sign() < 0:
		v.errorf(path, "%s is %s; it must be 0 or more", v.subject(path), q.String())
	case q.Cmp(hi) > 0:
		v.errorf(path, "%s is %s; it must be at most %s", v.subject(path), q.String(), hi.String())
	}
}

func (v *validator) top() {
	c := v.c
	if c.APIVersion != APIVersion {
		v.errorf("apiVersion", "apiVersion %q is not supported by this build; set \"apiVersion: %s\"", short(c.APIVersion), APIVersion)
	}
	if c.Kind != Kind {
		v.errorf("kind", "kind %q is not supported by this build; set \"kind: %s\"", short(c.Kind), Kind)
	}
	if c.ClusterName == "" {
		v.errorf("clusterName", "clusterName is required; set it to a DNS label such as \"demo\" (it is the value of the %s label on everything prebake creates)", providers.LabelCluster)
	} else {
		v.dnsLabel("clusterName", c.ClusterName, "a DNS label")
	}
	if c.RefreshInterval.Duration <= 0 {
		v.errorf("refreshInterval", "refreshInterval is %s; it must be more than 0 (default %s)", c.RefreshInterval, defaultRefreshInterval)
	}
	v.quantity("kubeReserved.cpu", c.KubeReserved.CPU, false, maxCPU, "")
	v.quantity("kubeReserved.memory", c.KubeReserved.Memory, false, maxMemory, "")
	if c.GPULabel == "" {
		v.errorf("gpuLabel", "gpuLabel is empty; set a label key, or leave it out for the default %q", defaultGPULabel)
	} else {
		v.labelKey("gpuLabel", c.GPULabel)
	}
	if f := c.ImageCatalog.File; f != "" {
		v.regularFile("imageCatalog.file", "imageCatalog.file", f)
	}
	if cm := c.ImageCatalog.ConfigMap; cm != "" {
		ns, name, ok := c.ImageCatalog.ConfigMapRef()
		switch {
		case !ok || strings.Count(cm, "/") != 1:
			v.errorf("imageCatalog.configMap", "imageCatalog.configMap %q: write it as NAMESPACE/NAME, such as kube-system/prebake-images", short(cm))
		default:
			v.dnsLabel("imageCatalog.configMap", ns, "a namespace (a DNS label)")
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				v.errorf("imageCatalog.configMap", "imageCatalog.configMap: name %q is not a ConfigMap name: %s", short(name), strings.Join(errs, "; "))
			}
		}
		if c.ImageCatalog.File != "" {
			v.errorf("imageCatalog", "imageCatalog sets both file and configMap; keep one")
		}
	}
}

func (v *validator) workers() {
	w := v.c.Workers
	if w.Parallelism < 1 || w.Parallelism > maxParallelism {
		v.errorf("workers.parallelism", "workers.parallelism is %d; use 1 to %d (default %d)", w.Parallelism, maxParallelism, defaultParallelism)
	}
	if math.IsNaN(w.QPS) || w.QPS <= 0 || w.QPS > maxQPS {
		v.errorf("workers.qps", "workers.qps is %v; use a number of API calls per second above 0 and at most %d (default %v)", w.QPS, maxQPS, defaultQPS)
	}
	if w.Burst < 1 || w.Burst > maxBurst {
		v.errorf("workers.burst", "workers.burst is %d; use 1 to %d (default 2 × qps)", w.Burst, maxBurst)
	}
	if w.Retries < 0 || w.Retries > maxRetries {
		v.errorf("workers.retries", "workers.retries is %d; use 0 to %d (default %d)", w.Retries, maxRetries, defaultRetries)
	}
}

func (v *validator) providers() {
	if len(v.c.Providers.Names()) == 0 {
		v.errorf("providers", "no provider is configured; add one under providers, such as \"kwok: {}\" (available: %s)", strings.Join(providerFields(), ", "))
	}
	if k := v.c.Providers.Kwok; k != nil {
		v.kwok(k)
	}
	if h := v.c.Providers.Hcloud; h != nil {
		v.hcloud(h)
	}
	if g := v.c.Providers.Gce; g != nil {
		v.gce(g)
	}
	if s := v.c.Providers.Static; s != nil {
		v.static(s)
	}
	if d := v.c.Providers.Docker; d != nil {
		v.docker(d)
	}
}

func (v *validator) hcloud(h *HcloudProvider) {
	const p = "providers.hcloud"
	switch t := h.Token; {
	case t.File == "" && t.Env == "":
		v.errorf(p+".token", "%s.token is required: set file (a path) or env (a variable name), such as \"token: {env: HCLOUD_TOKEN}\"", p)
	case t.File != "" && t.Env != "":
		v.errorf(p+".token", "%s.token: set either file or env, not both", p)
	}
	if h.Endpoint != "" {
		u, err := url.Parse(h.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.errorf(p+".endpoint", "%s.endpoint %q is not an http(s) URL; use such as \"https://api.hetzner.cloud/v1\", or leave it out", p, short(h.Endpoint))
		}
	}
	if h.Image == "" {
		v.errorf(p+".image", "%s.image is empty; name an image such as \"ubuntu-24.04\", or leave the key out for the default", p)
	}
	for _, ids := range []struct {
		key string
		ids []int64
	}{{"networks", h.Networks}, {"firewalls", h.Firewalls}, {"sshKeys", h.SSHKeys}} {
		for i, id := range ids.ids {
			if id <= 0 {
				ip := joinIndex(p+"."+ids.key, i)
				v.errorf(ip, "%s is %d; use the resource's numeric id (`hcloud %s list`)", ip, id, map[string]string{"networks": "network", "firewalls": "firewall", "sshKeys": "ssh-key"}[ids.key])
			}
		}
	}
	if h.PlacementGroup < 0 {
		v.errorf(p+".placementGroup", "%s.placementGroup is %d; use a placement group's id, or leave it out", p, h.PlacementGroup)
	}
	if k := h.StandbySSHKey; k.File != "" && k.Env != "" {
		v.errorf(p+".standbySSHKey", "%s.standbySSHKey: set either file or env, not both", p)
	}
	switch h.StandbySSHAddress {
	case StandbySSHPublic:
	case StandbySSHPrivate:
		if len(h.Networks) == 0 {
			v.errorf(p+".standbySSHAddress", "%s.standbySSHAddress is private, but no networks are set, so standbys have no private address; add the network prebake runs in to %s.networks, or use public", p, p)
		}
	default:
		v.errorf(p+".standbySSHAddress", "%s.standbySSHAddress %q: use public (a standby's public IPv4) or private (its IP in the first of networks)", p, short(h.StandbySSHAddress))
	}
}

func (v *validator) kwok(k *KwokProvider) {
	const p = "providers.kwok"
	v.dnsLabel(p+".namespace", k.Namespace, "a valid namespace name")
	for _, b := range []struct {
		path string
		d    Duration
	}{{p + ".simulatedBoot.prebaked", k.SimulatedBoot.Prebaked}, {p + ".simulatedBoot.runtimeInstall", k.SimulatedBoot.RuntimeInstall}} {
		if b.d.Duration < 0 {
			v.errorf(b.path, "%s is %s; use 0s or more", b.path, b.d)
		}
	}

	if k.MachineTypes != nil && len(k.MachineTypes) == 0 {
		v.errorf(p+".machineTypes", "%s.machineTypes is empty; list at least one machine type, or leave the key out to use the built-in ones", p)
	}
	v.machineTypes(p+".machineTypes", k.MachineTypes, "kwok-small")

	for _, zone := range sortedKeys(k.Capacity) {
		zp := joinKey(p+".capacity", zone)
		if zone == "" {
			v.errorf(zp, "%s: a zone name is empty", p+".capacity")
		} else {
			v.labelValue(zp, zone)
		}
		if n := k.Capacity[zone]; n < 0 {
			v.errorf(zp, "%s is %d; use 0 (simulated stockout) or more, or leave the zone out for no limit", zp, n)
		}
	}
}

// machineTypes checks a list of declared machine types at path and returns
// the set of their names. example is a name to suggest.
func (v *validator) machineTypes(path string, list []MachineType, example string) map[string]bool {
	names := map[string]bool{}
	firstIndex := map[string]int{}
	for i, m := range list {
		mp := joinIndex(path, i)
		if m.Name == "" {
			v.errorf(mp+".name", "%s: name is required, such as %q", mp, example)
		} else {
			v.labelValue(mp+".name", m.Name) // it is the node.kubernetes.io/instance-type label
			if j, dup := firstIndex[m.Name]; dup {
				v.errorf(mp+".name", "%s: machine type %q is also defined by %s; names must be unique", mp, short(m.Name), joinIndex(path, j))
			} else {
				firstIndex[m.Name] = i
				names[m.Name] = true
			}
		}
		v.quantity(mp+".cpu", m.CPU, true, maxCPU, "2")
		v.quantity(mp+".memory", m.Memory, true, maxMemory, "4Gi")
		v.quantity(mp+".ephemeralStorage", m.EphemeralStorage, false, maxDisk, "")
		if m.Pods < 0 || m.Pods > maxPodsPerNode {
			v.errorf(mp+".pods", "%s.pods is %d; use 1 to %d, or 0 for the kubelet default of %d", mp, m.Pods, maxPodsPerNode, providers.DefaultMaxPods)
		}
		if m.GPUs < 0 {
			v.errorf(mp+".gpus", "%s.gpus is %d; use 0 or more", mp, m.GPUs)
		}
		if m.GPUType != "" {
			v.labelValue(mp+".gpuType", m.GPUType) // it is the GPU label's value
		}
		if m.Arch != "amd64" && m.Arch != "arm64" {
			v.errorf(mp+".arch", "%s.arch is %q; use amd64 or arm64", mp, short(m.Arch))
		}
		if math.IsNaN(m.PricePerHour) || math.IsInf(m.PricePerHour, 0) || m.PricePerHour < 0 {
			v.errorf(mp+".pricePerHour", "%s.pricePerHour is %v; use 0 (unknown) or more", mp, m.PricePerHour)
		}
	}
	return names
}

func (v *validator) nodeGroups() {
	c := v.c
	if len(c.NodeGroups) == 0 {
		v.errorf("nodeGroups", "no node groups; add at least one under nodeGroups (see examples/kwok.yaml)")
	}
	firstIndex := map[string]int{}
	for i, g := range c.NodeGroups {
		p := joinIndex("nodeGroups", i)
		name := groupName(i, g.ID)

		switch {
		case g.ID == "":
			v.errorf(p+".id", "%s: id is required; set a DNS label of at most %d characters, such as \"small\"", name, maxGroupIDLen)
		case len(g.ID) > maxGroupIDLen:
			v.errorf(p+".id", "%s: id is %d characters long; use at most %d (it prefixes machine names)", name, len(g.ID), maxGroupIDLen)
		default:
			v.dnsLabel(p+".id", g.ID, "a DNS label")
		}
		if j, dup := firstIndex[g.ID]; dup && g.ID != "" {
			v.errorf(p+".id", "%s: id is also used by nodeGroups[%d] (line %d); ids must be unique", name, j, lineOf(c.lines, joinIndex("nodeGroups", j)))
		} else {
			firstIndex[g.ID] = i
		}

		v.groupProvider(p, name, g)

		if g.MinSize < 0 {
			v.errorf(p+".minSize", "%s: minSize %d is negative; use 0 or more", name, g.MinSize)
		}
		switch {
		case g.MaxSize < 1:
			v.errorf(p+".maxSize", "%s: maxSize is %d; it must be at least 1", name, g.MaxSize)
		case g.MaxSize > maxGroupSize:
			v.errorf(p+".maxSize", "%s: maxSize %d is more than %d; lower it or split the group", name, g.MaxSize, maxGroupSize)
		case g.MaxSize < g.MinSize:
			v.errorf(p+".maxSize", "%s: maxSize %d < minSize %d; raise maxSize or lower minSize", name, g.MaxSize, g.MinSize)
		}

		if g.MachineType == "" {
			v.errorf(p+".machineType", "%s: machineType is required, such as \"kwok-small\"", name)
		} else {
			v.labelValue(p+".machineType", g.MachineType)
			v.groupMachineType(p, name, g)
		}
		if g.Location == "" {
			v.errorf(p+".location", "%s: location is required; set the zone, such as \"zone-a\"", name)
		} else {
			v.labelValue(p+".location", g.Location)
			v.gceGroup(p, name, g)
		}
		if g.Region != "" {
			v.labelValue(p+".region", g.Region)
		}

		for _, key := range sortedKeys(g.Labels) {
			lp := joinKey(p+".labels", key)
			if msgs := content.IsLabelKey(key); len(msgs) > 0 {
				v.errorf(lp, "%s: label key %q is not valid: %s", name, short(key), strings.Join(msgs, "; "))
				continue
			}
			if strings.HasPrefix(key, "prebake.dev/") || slices.Contains(prebakeLabels, key) || key == c.GPULabel {
				v.errorf(lp, "%s: label %q is set by prebake; remove it from labels", name, short(key))
				continue
			}
			if msgs := content.IsLabelValue(g.Labels[key]); len(msgs) > 0 {
				v.errorf(lp, "%s: label %s: value %q is not valid: %s", name, short(key), short(g.Labels[key]), strings.Join(msgs, "; "))
			}
		}

		type keyEffect struct{ key, effect string }
		seenTaints := map[keyEffect]int{}
		for j, t := range g.TaintSpecs {
			tp := joinIndex(p+".taints", j)
			if t.Key == "" {
				v.errorf(tp+".key", "%s: taints[%d].key is required", name, j)
			} else {
				v.labelKey(tp+".key", t.Key)
			}
			if t.Value != "" {
				v.labelValue(tp+".value", t.Value)
			}
			if !slices.Contains(taintEffects, t.Effect) {
				v.errorf(tp+".effect", "%s: taints[%d].effect is %q; use NoSchedule, PreferNoSchedule or NoExecute", name, j, short(t.Effect))
			}
			ke := keyEffect{t.Key, t.Effect}
			if first, dup := seenTaints[ke]; dup {
				v.errorf(tp, "%s: taints[%d] repeats taints[%d] (key %q, effect %s); keep one", name, j, first, short(t.Key), short(t.Effect))
			} else {
				seenTaints[ke] = j
			}
		}

		if g.Image.Channel != "" {
			v.dnsLabel(p+".image.channel", g.Image.Channel, "a channel name (a DNS label such as \"stable\")")
		}
		if o := g.Image.OS; o != "" && !osRelease.MatchString(o) {
			v.errorf(p+".image.os", "%s: image.os %q is not an OS release; write it as the image names do, such as \"ubuntu-2404\" or \"debian-12\"", name, short(o))
		}
		if m := g.Image.K8sMinor; m != "" && !k8sMinor.MatchString(m) {
			v.errorf(p+".image.k8sMinor", "%s: image.k8sMinor %q is not a Kubernetes minor; write it as \"1.35\"", name, short(m))
		}
		if (g.Image.OS != "" || g.Image.K8sMinor != "") && g.Image.Channel == "" {
			v.errorf(p+".image", "%s: image.os and image.k8sMinor narrow a channel; set image.channel too, or remove them", name)
		}
		for j := range g.Image.ContainerImages {
			if err := imagecatalog.CheckContainerImage(g.Image.ContainerImages, j); err != nil {
				v.errorf(fmt.Sprintf("%s.image.containerImages[%d]", p, j), "%s: image.containerImages[%d]: %v", name, j, err)
			}
		}
		if len(g.Image.ContainerImages) > 0 && g.Image.Channel == "" {
			v.errorf(p+".image.containerImages", "%s: image.containerImages say which images the channel's image should hold; set image.channel too, or remove them", name)
		}
		v.groupImageFamily(p, name, g)
		v.groupNetwork(p, name, g)
		v.groupWarmPool(p, name, g)
		if f := g.UserDataFile; f != "" {
			v.regularFile(p+".userDataFile", name+": userDataFile", f)
		}
	}
}

// regularFile checks that the file at f exists and is a regular file; what
// names it in the message.
func (v *validator) regularFile(path, what, f string) {
	switch st, err := os.Stat(f); {
	case err != nil:
		v.errorf(path, "%s %q can't be read (%v); fix the path (a relative path is relative to the config file)", what, short(f), errors.Unwrap(err))
	case !st.Mode().IsRegular():
		v.errorf(path, "%s %q is not a regular file", what, short(f))
	}
}

// groupProvider checks that the group names a configured provider.
func (v *validator) groupProvider(p, name string, g NodeGroup) {
	configured := v.c.Providers.Names()
	switch {
	case g.Provider == "":
		v.errorf(p+".provider", "%s: provider is required; set one of the configured providers (%s)", name, strings.Join(configured, ", "))
	case slices.Contains(configured, g.Provider):
	case slices.Contains(providerFields(), g.Provider):
		v.errorf(p+".provider", "%s: provider %q is not configured; add it under providers", name, g.Provider)
	default:
		hint := ""
		if s := suggest(g.Provider, providerFields()); s != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", s)
		}
		v.errorf(p+".provider", "%s: unknown provider %q%s; available: %s", name, short(g.Provider), hint, strings.Join(providerFields(), ", "))
	}
}

// groupMachineType checks the machine type against a configured list; the
// providers' built-in types are checked when the provider starts.
func (v *validator) groupMachineType(p, name string, g NodeGroup) {
	var list []MachineType
	switch {
	case g.Provider == "kwok" && v.c.Providers.Kwok != nil:
		list = v.c.Providers.Kwok.MachineTypes
	case g.Provider == "static" && v.c.Providers.Static != nil:
		list = v.c.Providers.Static.MachineTypes
	case g.Provider == "docker" && v.c.Providers.Docker != nil:
		list = v.c.Providers.Docker.MachineTypes
	}
	if len(list) == 0 {
		return
	}
	names := make([]string, 0, len(list))
	for _, m := range list {
		if m.Name == g.MachineType {
			return
		}
		names = append(names, m.Name)
	}
	hint := ""
	if s := suggest(g.MachineType, names); s != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", s)
	}
	v.errorf(p+".machineType", "%s: machineType %q is not in providers.%s.machineTypes%s; have: %s", name, short(g.MachineType), g.Provider, hint, strings.Join(names, ", "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
