package bootstrap

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Input is everything one node's user-data depends on. Render validates it; an invalid field
// is an error naming the field and what would fix it. JoinToken is a secret: it appears in the
// rendered output and nowhere else (never in errors or logs).
type Input struct {
	// Provider is the provider that boots the machine: kwok, hcloud, gce or static. It is
	// recorded in the status file and chooses nothing else: every provider gets the same script.
	Provider string
	Cluster  Cluster
	// JoinToken is a kubeadm bootstrap token, "<id>.<secret>" (see NewToken).
	JoinToken string
	// NodeName is the Node object's name; it must be a DNS-1123 subdomain.
	NodeName string
	// ProviderID is set in the kubelet configuration, so the Node carries it from the start.
	// Empty means it is known only at boot: the script takes $PREBAKE_PROVIDER_ID from its
	// environment (the static provider sets it to static://<host> for the machine it
	// claimed) or, when that is unset too, leaves it to the cloud's controller manager
	// (hcloud's CCM sets hcloud://<id> on the Node it initialises).
	ProviderID string
	// Labels and Taints are registered by the kubelet with the Node (kubeadm nodeRegistration).
	Labels map[string]string
	Taints []Taint
	// Components are what the node must run, at exact versions. Components already present at
	// the wanted version (per dpkg, or per the image manifest for binaries) are not installed.
	Components []Component
	// Sysctls and Modules are the kernel settings the node needs; nil means DefaultSysctls and
	// DefaultModules.
	Sysctls map[string]string
	Modules []string
	// Network is the node's network mode (docs/networking.md); the zero value is none.
	Network Network
	// Runtime is what the node needs where it is not a VM of its own (runtime.go); the zero
	// value is a VM's.
	Runtime Runtime
	// UserDataForm is how the machine takes its user-data, as its provider declares it
	// (providers.Capabilities.UserData). Render renders the cloud-config and the script
	// whatever it is; RenderIgnition needs FormCloudInit.
	UserDataForm UserDataForm
	// StandbyResume is how a standby (Options.Standby) gets its join once resumed, as its
	// provider declares it (standby.go); empty (ResumeBySeed) for every other machine.
	StandbyResume StandbyResume
	Options       Options
}

// UserDataForm is how a machine takes its user-data. Providers declare it
// (providers.Capabilities.UserData is this type), so a renderer can tell what a machine
// reads without knowing its provider by name.
type UserDataForm int

const (
	// FormNone: the machines boot nothing (kwok); no user-data is rendered.
	FormNone UserDataForm = iota
	// FormCloudInit: the machine's first-boot agent reads it: cloud-init (#cloud-config),
	// or Ignition where the image's OS takes Ignition.
	FormCloudInit
	// FormScript: the node script itself, run over a shell on a machine that is booted
	// already (static machines have no datasource).
	FormScript
)

func (f UserDataForm) String() string {
	switch f {
	case FormNone:
		return "none"
	case FormCloudInit:
		return "cloud-init"
	case FormScript:
		return "script"
	}
	return fmt.Sprintf("UserDataForm(%d)", int(f))
}

// Cluster is the control plane the node joins.
type Cluster struct {
	// APIServerEndpoint is host:port of the kube-apiserver, as kubeadm join takes it.
	APIServerEndpoint string
	// CACertHashes pin the cluster CA: "sha256:<64 hex>" of its public key (kubeadm's
	// --discovery-token-ca-cert-hash). At least one is required.
	CACertHashes []string
}

// Taint is a node taint registered at join.
type Taint struct {
	Key, Value string
	Effect     string // NoSchedule, PreferNoSchedule or NoExecute
}

// Component is one thing the node must have, at one exact version. With URL empty it is a
// Debian package installed with apt at exactly Version; otherwise it is a binary downloaded
// from URL, checked against SHA256 and installed at Path.
type Component struct {
	// Name is the component's name in the image manifest (imagecatalog.DefaultComponents).
	Name string
	// Version is exact: the Debian version (1.6.20~ds1-1+b1, 1:9.2.1-3) for apt, or the
	// release (v1.35.4) for a binary.
	Version string
	// Package is the apt package name when it differs from Name.
	Package string
	// URL, SHA256 and Path describe a binary component.
	URL    string
	SHA256 string
	Path   string
}

// Binary reports whether c is installed from a URL rather than through apt.
func (c Component) Binary() bool { return c.URL != "" }

func (c Component) aptPackage() string {
	if c.Package != "" {
		return c.Package
	}
	return c.Name
}

// Options tune the script; the zero value is what production uses.
type Options struct {
	// DpkgLockWait bounds the wait for the dpkg lock before installing; 0 means
	// DefaultDpkgLockWait. When the lock is still held after it, the script fails with an
	// error naming the lock and the bound.
	DpkgLockWait time.Duration
	// RecordHostCommands makes the script append sysctl, modprobe and systemctl command lines
	// to RecordFile instead of running them. A chroot shares the host kernel and has no
	// systemd, so tests set it.
	RecordHostCommands bool
	// SkipJoin skips kubeadm join (tests: there is no cluster to join in a chroot).
	SkipJoin bool
	// Standby renders a warm-pool standby's user-data: the script installs and configures,
	// then writes the status result StatusPrepared and ends, just before the join. It holds
	// no join token (JoinToken must be empty): the user-data the machine gets when it is
	// taken has one, and runs the whole script, which then installs nothing and joins.
	Standby bool
	// StatusPath is where the script writes its phase report; "" means DefaultStatusPath.
	StatusPath string
}

// Defaults of Options and of the kernel settings.
const (
	DefaultDpkgLockWait = 10 * time.Minute
	DefaultStatusPath   = "/var/lib/prebake/bootstrap-status.json"
	// ManifestPath is the image manifest (imagecatalog.Manifest as JSON) baked into images.
	ManifestPath = "/etc/prebake/manifest.json"
	// ScriptPath is where the cloud-config writes the script.
	ScriptPath = "/var/lib/prebake/bootstrap.sh"
	// RecordFile receives the host commands under Options.RecordHostCommands.
	RecordFile = "/var/lib/prebake/recorded-host-commands"
)

var (
	DefaultSysctls = map[string]string{
		"net.bridge.bridge-nf-call-iptables":  "1",
		"net.bridge.bridge-nf-call-ip6tables": "1",
		"net.ipv4.ip_forward":                 "1",
	}
	DefaultModules = []string{"br_netfilter", "overlay"}
)

var (
	// Debian package names; component names follow them.
	componentName = regexp.MustCompile(`^[a-z0-9][a-z0-9.+-]*$`)
	// The same rule as imagecatalog's exact versions: one build, no ranges.
	exactVersion = regexp.MustCompile(`^([0-9]+:)?[0-9A-Za-z][0-9A-Za-z.+~_-]*$`)
	sha256Hex    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	caCertHash   = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	binaryPath   = regexp.MustCompile(`^/[A-Za-z0-9._/+-]+$`)
	sysctlKey    = regexp.MustCompile(`^[a-z0-9_]+(\.[a-zA-Z0-9_-]+)+$`)
	sysctlValue  = regexp.MustCompile(`^[A-Za-z0-9 ._:/-]+$`)
	moduleName   = regexp.MustCompile(`^[a-z0-9_-]+$`)
	providerName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

var taintEffects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}

// validate checks in and returns it with defaults filled in. Errors never contain JoinToken.
func (in Input) validate() (Input, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !providerName.MatchString(in.Provider) {
		bad("provider %q: want a provider name such as hcloud, gce, kwok or static", in.Provider)
	}
	if host, port, err := net.SplitHostPort(in.Cluster.APIServerEndpoint); err != nil || host == "" {
		bad("cluster.apiServerEndpoint %q: want host:port, e.g. 10.0.0.1:6443", in.Cluster.APIServerEndpoint)
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		bad("cluster.apiServerEndpoint %q: port must be 1-65535", in.Cluster.APIServerEndpoint)
	} else if strings.ContainsAny(host, " \t\n'\"\\$`") {
		bad("cluster.apiServerEndpoint %q: host has characters no host name or address has", in.Cluster.APIServerEndpoint)
	}
	if len(in.Cluster.CACertHashes) == 0 {
		bad("cluster.caCertHashes: at least one is required (kubeadm token create --print-join-command shows it)")
	}
	for i, h := range in.Cluster.CACertHashes {
		if !caCertHash.MatchString(h) {
			bad("cluster.caCertHashes[%d] %q: want sha256:<64 lower-case hex digits>", i, h)
		}
	}
	if in.Options.Standby {
		if in.JoinToken != "" {
			bad("joinToken: a standby's user-data (options.standby) holds no join token; it gets one when it is taken")
		}
	} else if !tokenFormat.MatchString(in.JoinToken) {
		// The value is a secret: say what is wrong with it, never what it is.
		bad("joinToken: want a kubeadm bootstrap token [a-z0-9]{6}.[a-z0-9]{16} (use bootstrap.NewToken)")
	}
	in.StandbyResume.validate(in.Options.Standby, bad)
	if msgs := validation.IsDNS1123Subdomain(in.NodeName); len(msgs) > 0 {
		bad("nodeName %q: %s", in.NodeName, strings.Join(msgs, "; "))
	}
	if strings.ContainsFunc(in.ProviderID, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		bad("providerID %q: want an id without control characters, e.g. gce://project/zone/name, or empty to take it at boot", in.ProviderID)
	}
	for _, k := range slices.Sorted(maps.Keys(in.Labels)) {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			bad("labels: key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(in.Labels[k]); len(msgs) > 0 {
			bad("labels: %q value %q: %s", k, in.Labels[k], strings.Join(msgs, "; "))
		}
	}
	for i, t := range in.Taints {
		if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
			bad("taints[%d]: key %q: %s", i, t.Key, strings.Join(msgs, "; "))
		}
		if t.Value != "" {
			if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
				bad("taints[%d]: value %q: %s", i, t.Value, strings.Join(msgs, "; "))
			}
		}
		if !slices.Contains(taintEffects, t.Effect) {
			bad("taints[%d]: effect %q: want one of %s", i, t.Effect, strings.Join(taintEffects, ", "))
		}
	}
	in.Network.validate(bad)
	in = in.validateInstall(bad)
	if len(errs) > 0 {
		return in, fmt.Errorf("bootstrap input: %w", errors.Join(errs...))
	}
	return in, nil
}

// validateInstall checks what the install part of the script depends on (provider aside):
// components, kernel settings and options. Render and RenderBuilder share it; it returns in
// with defaults filled in and reports each problem through bad.
func (in Input) validateInstall(bad func(format string, args ...any)) Input {
	seen := map[string]bool{}
	for i, c := range in.Components {
		where := fmt.Sprintf("components[%d] (%s)", i, c.Name)
		if !componentName.MatchString(c.Name) {
			bad("%s: name %q: want a Debian-style package name [a-z0-9][a-z0-9.+-]*", where, c.Name)
		}
		if seen[c.Name] {
			bad("%s: listed twice; keep one entry per component", where)
		}
		seen[c.Name] = true
		if !exactVersion.MatchString(c.Version) || strings.EqualFold(c.Version, "latest") {
			bad("%s: version %q is not exact (want e.g. 1.6.20~ds1-1+b1 or v1.35.4)", where, c.Version)
		}
		if c.Package != "" && !componentName.MatchString(c.Package) {
			bad("%s: package %q: want a Debian package name", where, c.Package)
		}
		if !c.Binary() {
			if c.SHA256 != "" || c.Path != "" {
				bad("%s: sha256 and path need a url (a binary component); an apt component has neither", where)
			}
			continue
		}
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			strings.ContainsAny(c.URL, " \t\n'\"\\`$") {
			bad("%s: url %q: want an http(s) URL without quotes or spaces", where, c.URL)
		}
		if !sha256Hex.MatchString(c.SHA256) {
			bad("%s: sha256 %q: want 64 lower-case hex digits (sha256sum of the binary)", where, c.SHA256)
		}
		if !binaryPath.MatchString(c.Path) || strings.Contains(c.Path, "/../") || strings.HasSuffix(c.Path, "/") {
			bad("%s: path %q: want an absolute file path such as /usr/bin/%s", where, c.Path, c.Name)
		}
	}
	if in.Sysctls == nil {
		in.Sysctls = maps.Clone(DefaultSysctls)
	}
	for _, k := range slices.Sorted(maps.Keys(in.Sysctls)) {
		if !sysctlKey.MatchString(k) || !sysctlValue.MatchString(in.Sysctls[k]) {
			bad("sysctls: %q = %q: want a dotted key and a plain value", k, in.Sysctls[k])
		}
	}
	if in.Modules == nil {
		in.Modules = slices.Clone(DefaultModules)
	}
	for _, m := range in.Modules {
		if !moduleName.MatchString(m) {
			bad("modules: %q: want a kernel module name", m)
		}
	}
	in.Runtime = in.Runtime.validate(bad)
	if in.Options.DpkgLockWait < 0 {
		bad("options.dpkgLockWait %s: must not be negative", in.Options.DpkgLockWait)
	}
	if in.Options.DpkgLockWait == 0 {
		in.Options.DpkgLockWait = DefaultDpkgLockWait
	}
	if in.Options.StatusPath == "" {
		in.Options.StatusPath = DefaultStatusPath
	}
	if !binaryPath.MatchString(in.Options.StatusPath) {
		bad("options.statusPath %q: want an absolute path", in.Options.StatusPath)
	}
	return in
}
