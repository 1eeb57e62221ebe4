package imagecatalog

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// This file is the one home of every cloud label the catalog writes: on
// images (what the name says, the manifest, verification, deprecation and
// channel pointers) and on builder servers (the verification report). Labels
// are what lets `prebake images sync` rebuild the catalog from the cloud.
//
// Values are encoded (EncodeLabelValue) into lower-case letters, digits, '-'
// and '_', which fit both Hetzner's and GCE's label rules.

// More label keys (see api.go for the name, hash, os, k8s, arch and verified
// ones).
const (
	// LabelDeprecated is "true" on a deprecated image.
	LabelDeprecated = "prebake.dev/deprecated"
	// labelChannelPrefix + channel name: "current" on the image the channel
	// points to, "history-N" on step N of its history (see ChannelLabel).
	labelChannelPrefix = "prebake.dev/channel-"
	// labelPkgPrefix + component: the component's version.
	labelPkgPrefix = "prebake.dev/pkg-"
	// labelSysctlPrefix + encoded sysctl key: its value.
	labelSysctlPrefix = "prebake.dev/sysctl-"
	// labelModulePrefix + encoded module name: "true".
	labelModulePrefix = "prebake.dev/module-"
	// LabelUnattendedUpgrades is "disabled" or "enabled".
	LabelUnattendedUpgrades = "prebake.dev/unattended-upgrades"
	// LabelBuilder marks a builder server; the value is the inputs hash it
	// builds, so a leaked builder can be found and deleted by label.
	LabelBuilder = "prebake.dev/builder"

	// labelPrefix is what every key above starts with. Labels without it
	// belong to the user and are never touched.
	labelPrefix = "prebake.dev/"
)

// Channel label values.
const (
	channelCurrent       = "current"
	channelHistoryPrefix = "history-"
)

// Hygiene checks a builder reports; each must be "pass".
var HygieneChecks = []string{
	"ssh-host-keys",       // /etc/ssh/ssh_host_* removed
	"machine-id",          // /etc/machine-id empty or "uninitialized"
	"cloud-init-state",    // no /var/lib/cloud/instance(s), data/instance-id
	"ssh-authorized-keys", // no /root/.ssh/authorized_keys, /home/*/.ssh/authorized_keys
	"apt-cache",           // /var/cache/apt/archives/*.deb and /var/lib/apt/lists/* removed
}

// hygieneFix says how to fix each failed check, for the error message.
var hygieneFix = map[string]string{
	"ssh-host-keys":       "remove /etc/ssh/ssh_host_* before the snapshot, or every node shares host keys",
	"machine-id":          "truncate /etc/machine-id, or every node shares one machine id",
	"cloud-init-state":    "run `cloud-init clean --logs`, or cloud-init skips its first boot on nodes",
	"ssh-authorized-keys": "remove /root/.ssh/authorized_keys and /home/*/.ssh/authorized_keys, or whoever built the image can log in to every node",
	"apt-cache":           "run `apt-get clean && rm -rf /var/lib/apt/lists/*`",
}

var labelValue = regexp.MustCompile(`^(([a-z0-9A-Z][-a-z0-9_.A-Z]*)?[a-z0-9A-Z])?$`)

// EncodeLabelValue maps s (a package version, a sysctl key) to a label value
// of lower-case letters, digits, '-' and '_': '_' becomes "__", and '.', ':',
// '+', '~' and upper-case letters become '_' and a letter. So 1.34.2-1.1 is
// 1_d34_d2-1_d1. It fails when the result is not a valid value (too long, or
// not starting and ending with a letter or digit).
func EncodeLabelValue(s string) (string, error) {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteString("_u")
			b.WriteRune(r - 'A' + 'a')
		default:
			code, ok := labelEscapes[r]
			if !ok {
				return "", fmt.Errorf("label value %q: character %q can't be encoded", s, r)
			}
			b.WriteByte('_')
			b.WriteByte(code)
		}
	}
	out := b.String()
	if len(out) > 63 || !labelValue.MatchString(out) {
		return "", fmt.Errorf("label value %q encodes to %q, which is not a label value (at most 63 characters, starting and ending with a letter or digit)", s, out)
	}
	return out, nil
}

var labelEscapes = map[rune]byte{'_': '_', '.': 'd', ':': 'c', '+': 'p', '~': 't'}

// DecodeLabelValue inverts EncodeLabelValue.
func DecodeLabelValue(v string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if i+1 == len(v) {
			return "", fmt.Errorf("label value %q ends in an unfinished escape", v)
		}
		i++
		e := v[i]
		if e == 'u' {
			if i+1 == len(v) || v[i+1] < 'a' || v[i+1] > 'z' {
				return "", fmt.Errorf("label value %q: _u must be followed by a letter", v)
			}
			i++
			b.WriteByte(v[i] - 'a' + 'A')
			continue
		}
		found := false
		for r, code := range labelEscapes {
			if code == e {
				b.WriteRune(r)
				found = true
				break
			}
		}
		if !found {
			return "", fmt.Errorf("label value %q: unknown escape _%c", v, e)
		}
	}
	return b.String(), nil
}

// ManifestLabels are the labels that carry a manifest.
func ManifestLabels(m Manifest) (map[string]string, error) {
	l := map[string]string{}
	var errs []error
	put := func(key, raw string) {
		v, err := EncodeLabelValue(raw)
		if err != nil {
			errs = append(errs, err)
			return
		}
		l[key] = v
	}
	for c, v := range m.Components {
		put(labelPkgPrefix+c, v)
	}
	for k, v := range m.Sysctls {
		ek, err := EncodeLabelValue(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		put(labelSysctlPrefix+ek, v)
	}
	for _, mod := range m.Modules {
		em, err := EncodeLabelValue(mod)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l[labelModulePrefix+em] = "true"
	}
	l[LabelUnattendedUpgrades] = map[bool]string{true: "disabled", false: "enabled"}[m.UnattendedUpgradesDisabled]
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("manifest labels: %w", err)
	}
	return l, nil
}

// ManifestFromLabels reads what ManifestLabels wrote. ok is false when the
// labels carry no manifest at all.
func ManifestFromLabels(l map[string]string) (m Manifest, ok bool, err error) {
	m.Components = map[string]string{}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(l)) {
		v := l[k]
		switch {
		case strings.HasPrefix(k, labelPkgPrefix):
			dv, err := DecodeLabelValue(v)
			errs = append(errs, err)
			m.Components[strings.TrimPrefix(k, labelPkgPrefix)] = dv
			ok = true
		case strings.HasPrefix(k, labelSysctlPrefix):
			dk, err1 := DecodeLabelValue(strings.TrimPrefix(k, labelSysctlPrefix))
			dv, err2 := DecodeLabelValue(v)
			errs = append(errs, err1, err2)
			if m.Sysctls == nil {
				m.Sysctls = map[string]string{}
			}
			m.Sysctls[dk] = dv
		case strings.HasPrefix(k, labelModulePrefix):
			dm, err := DecodeLabelValue(strings.TrimPrefix(k, labelModulePrefix))
			errs = append(errs, err)
			m.Modules = append(m.Modules, dm)
		case k == LabelUnattendedUpgrades:
			m.UnattendedUpgradesDisabled = v == "disabled"
		}
	}
	slices.Sort(m.Modules)
	return m, ok, errors.Join(errs...)
}

// ChannelLabel is the label that records that the image is channel's
// current image (step 0) or step N of its history. The key for the channel
// is the image's own, so it is not repeated.
func ChannelLabel(channel string, step int) (key, value string) {
	if step == 0 {
		return labelChannelPrefix + channel, channelCurrent
	}
	return labelChannelPrefix + channel, channelHistoryPrefix + strconv.Itoa(step)
}

// DesiredLabels are every catalog label image id should carry in the cloud,
// given the whole catalog: its own labels, its manifest, deprecation and the
// channels that point to it or keep it in their history. An image kept twice
// in one channel's history is labelled with its newest step.
func DesiredLabels(c Catalog, id string) (map[string]string, error) {
	im, ok := c.Image(id)
	if !ok {
		return nil, fmt.Errorf("labels of image %q: %w in the catalog", id, ErrNotFound)
	}
	l, err := Labels(im)
	if err != nil {
		return nil, err
	}
	ml, err := ManifestLabels(im.Manifest)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", id, err)
	}
	maps.Copy(l, ml)
	if im.Deprecated != nil {
		l[LabelDeprecated] = "true"
	}
	for _, ch := range c.Channels {
		if len(labelChannelPrefix+ch.Name) > len(labelPrefix)+63 {
			return nil, fmt.Errorf("channel %q: the name is too long for a label key (at most %d characters)", ch.Name, 63-len("channel-"))
		}
		step := -1
		if ch.Image == id {
			step = 0
		} else if i := slices.IndexFunc(ch.History, func(e Entry) bool { return e.Image == id }); i >= 0 {
			step = i + 1
		}
		if step >= 0 {
			k, v := ChannelLabel(ch.Name, step)
			l[k] = v
		}
	}
	return l, nil
}

// mergeLabels replaces the catalog's labels in cloud with want and keeps
// every label that is not the catalog's (no prebake.dev/ prefix).
func mergeLabels(cloud, want map[string]string) map[string]string {
	out := maps.Clone(want)
	for k, v := range cloud {
		if !strings.HasPrefix(k, labelPrefix) {
			out[k] = v
		}
	}
	return out
}
