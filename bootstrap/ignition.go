package bootstrap

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	ign "github.com/coreos/ignition/v2/config/v3_4"
	igntypes "github.com/coreos/ignition/v2/config/v3_4/types"
)

// IgnitionOS is an OS family that is configured by Ignition instead of cloud-init.
type IgnitionOS string

// The Ignition families prebake renders for.
const (
	// Flatcar Container Linux: kubelet and kubeadm come from the Kubernetes sysext;
	// containerd is part of the OS and uses the systemd cgroup driver out of the box.
	Flatcar IgnitionOS = "flatcar"
	// FCOS is Fedora CoreOS: the same sysext; containerd is part of the OS (moby-engine's
	// dependency), gets the CRI configuration written and is enabled; the sysext service is
	// enabled explicitly.
	FCOS IgnitionOS = "fcos"
)

// IgnitionSpecVersion is the Ignition config spec rendered: 3.4.0 is the newest stable spec
// that both Flatcar (Butane variant flatcar 1.1.0) and Fedora CoreOS (fcos 1.5.0 and later)
// accept (https://coreos.github.io/butane/specs/).
const IgnitionSpecVersion = "3.4.0"

// Paths of an Ignition node.
const (
	// SysextDir holds the Kubernetes sysext images; SysextLink is what systemd-sysext merges.
	// The layout is sysext-bakery's (https://flatcar.github.io/sysext-bakery/).
	SysextDir  = "/opt/extensions/kubernetes"
	SysextLink = "/etc/extensions/kubernetes.raw"
	// IgnitionJoinScript runs the join; IgnitionJoinUnit is the systemd unit that runs it.
	IgnitionJoinScript = "/var/lib/prebake/join.sh"
	IgnitionJoinUnit   = "prebake-join.service"
	// JoinConfigPath is the kubeadm JoinConfiguration (0600: it holds the join token). The
	// cloud-init script writes the same file.
	JoinConfigPath = "/etc/prebake/kubeadm-join.yaml"
)

// SysextComponent is the Kubernetes sysext's name in an image manifest.
const SysextComponent = "kubernetes-sysext"

// Sysext is the Kubernetes system extension an Ignition node runs kubelet and kubeadm from,
// in sysext-bakery's format (a .raw image under SysextDir, linked to SysextLink).
type Sysext struct {
	// Version is the Kubernetes release, v1.35.4: the image manifest's SysextComponent.
	Version string
	// Arch is the machine's, in Kubernetes' names: amd64 or arm64.
	Arch string
	// URL and SHA256 are where the runtime path downloads the image from and what it must
	// hash to; Ignition checks it (verification.hash) before it writes the file. A prebaked
	// image needs neither.
	URL    string
	SHA256 string
}

// Path is where the image lives on the node: the bakery's name,
// kubernetes-<version>-<x86-64|arm64>.raw.
func (s Sysext) Path() string {
	arch := s.Arch
	if arch == "amd64" {
		arch = "x86-64"
	}
	return SysextDir + "/kubernetes-" + s.Version + "-" + arch + ".raw"
}

// IgnitionInput is what an Ignition node's config depends on: the same Input the cloud-init
// renderer takes, the OS family and the sysext.
type IgnitionInput struct {
	Input
	OS     IgnitionOS
	Sysext Sysext
	// Prebaked means the image carries the sysext at Sysext.Version, linked at SysextLink
	// (its catalog manifest says so): the config downloads nothing. Otherwise Ignition
	// downloads Sysext.URL, checked against Sysext.SHA256, and links it. Either way the join
	// unit checks the merged version before it joins.
	Prebaked bool
}

// IgnitionConfig is one node's rendered Ignition config. It holds the join token: never log it.
type IgnitionConfig struct {
	// JSON is the config, for user-data on Hetzner and GCE.
	JSON []byte
}

// String keeps a stray %v or slog call from printing the secret.
func (IgnitionConfig) String() string {
	return "bootstrap.IgnitionConfig{<redacted: holds a join token>}"
}

//go:embed ignition.sh
var ignitionJoinScript string

var sysextVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// RenderIgnition validates in and renders its Ignition config, then checks it with the
// Ignition library's own validation (the one Ignition runs at boot). The error names every
// invalid field and never contains the join token.
func RenderIgnition(in IgnitionInput) (IgnitionConfig, error) {
	valid, err := in.validate()
	if err != nil {
		return IgnitionConfig{}, err
	}
	cfg, err := buildIgnition(valid)
	if err != nil {
		return IgnitionConfig{}, err
	}
	data, err := validateIgnition(cfg, valid.JoinToken)
	if err != nil {
		return IgnitionConfig{}, err
	}
	return IgnitionConfig{JSON: data}, nil
}

func (in IgnitionInput) validate() (IgnitionInput, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	base, err := in.Input.validate()
	if err != nil {
		errs = append(errs, err)
	}
	in.Input = base
	if in.OS != Flatcar && in.OS != FCOS {
		bad("os %q: want %s or %s (Debian and Ubuntu nodes take the cloud-init renderer, Render)", in.OS, Flatcar, FCOS)
	}
	if in.UserDataForm != FormCloudInit {
		bad("userDataForm %s: Ignition reads its config only from the user-data of an image's first boot (form %s); a machine that takes the node script over a shell (static) is booted already and takes Render's script, and one that takes none renders nothing", in.UserDataForm, FormCloudInit)
	}
	if in.Options.Standby {
		bad("options.standby: Ignition runs only at an image's first boot, so a resumed warm-pool standby would never get its join; keep warmPool off groups of Ignition images (Flatcar, Fedora CoreOS)")
	}
	s := in.Sysext
	if !sysextVersion.MatchString(s.Version) {
		bad("sysext.version %q: want an exact Kubernetes release such as v1.35.4 (the image manifest's %s)", s.Version, SysextComponent)
	}
	if s.Arch != "amd64" && s.Arch != "arm64" {
		bad("sysext.arch %q: want amd64 or arm64, the machine type's", s.Arch)
	}
	if !in.Prebaked {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("sysext.url %q: the runtime path downloads the sysext; want an http(s) URL such as https://extensions.flatcar.org/extensions/kubernetes-v1.35.4-x86-64.raw", s.URL)
		}
		if !sha256Hex.MatchString(s.SHA256) {
			bad("sysext.sha256 %q: want 64 lower-case hex digits (sha256sum of the .raw image); Ignition refuses the file when it does not match", s.SHA256)
		}
	}
	if len(errs) > 0 {
		return in, fmt.Errorf("bootstrap ignition input: %w", errors.Join(errs...))
	}
	return in, nil
}

// joinUnit is the systemd unit that joins. It runs after the sysext is merged and containerd
// is up, once per boot until the kubelet has its kubeconfig.
const joinUnit = `[Unit]
Description=prebake: join the Kubernetes cluster (kubeadm join)
Wants=network-online.target
After=network-online.target systemd-sysext.service containerd.service
Requires=containerd.service
ConditionPathExists=!/etc/kubernetes/kubelet.conf

[Service]
Type=oneshot
RemainAfterExit=yes
Environment=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/bin
ExecStart=/bin/sh ` + IgnitionJoinScript + `
Restart=on-failure
RestartSec=10

[Install]
WantedBy=multi-user.target
`

// Files that turn the OS's own automatic updates off: the image catalog decides what a node
// runs, and a node that updated itself in place is no longer the image it was booted from.
var autoUpdatesOff = map[IgnitionOS]file{
	// https://www.flatcar.org/docs/latest/setup/releases/update-strategies/ ("Disable
	// Automatic Updates")
	Flatcar: {"/etc/flatcar/update.conf", "0644", "", "SERVER=disabled\n"},
	// https://coreos.github.io/zincati/usage/auto-updates/ ("Disabling auto-updates")
	FCOS: {"/etc/zincati/config.d/90-disable-auto-updates.toml", "0644", "", "[updates]\nenabled = false\n"},
}

// buildIgnition turns a validated input into the config. Contents that the cloud-init
// renderer writes too (the JoinConfiguration, the kubelet patch, the kernel settings, the
// containerd configuration) come from the same functions.
func buildIgnition(in IgnitionInput) (igntypes.Config, error) {
	cfg := igntypes.Config{Ignition: igntypes.Ignition{Version: IgnitionSpecVersion}}
	var files []file

	kubelet, err := kubeletFiles(in.Input)
	if err != nil {
		return cfg, err
	}
	files = append(files, kubelet...)
	if in.ProviderID == "" {
		// The cloud's controller manager sets the providerID; kubeadm still reads the
		// patch directory, so the patch is there and changes nothing.
		files = append(files, file{KubeletPatchPath, "0644", "none", "{}\n"})
	}
	configure, err := configureFiles(in.Input)
	if err != nil {
		return cfg, err
	}
	for _, f := range configure {
		switch {
		case f.action == "kubelet-unit":
			// The sysext ships the kubelet's unit and kubeadm drop-in.
		case f.action == "containerd" && in.OS == Flatcar:
			// Flatcar's containerd reads /usr/share/containerd/config.toml, with the
			// systemd cgroup driver on.
		default:
			files = append(files, f)
		}
	}
	files = append(files, autoUpdatesOff[in.OS],
		file{IgnitionJoinScript, "0700", "", renderIgnitionJoinScript(in)})

	for _, f := range files {
		ignFile, err := ignitionFile(f.path, f.mode, f.content)
		if err != nil {
			return cfg, err
		}
		cfg.Storage.Files = append(cfg.Storage.Files, ignFile)
	}
	if !in.Prebaked {
		cfg.Storage.Files = append(cfg.Storage.Files, igntypes.File{
			Node: igntypes.Node{Path: in.Sysext.Path(), Overwrite: ptr(true)},
			FileEmbedded1: igntypes.FileEmbedded1{Mode: ptr(0o644), Contents: igntypes.Resource{
				Source:       ptr(in.Sysext.URL),
				Verification: igntypes.Verification{Hash: ptr("sha256-" + in.Sysext.SHA256)},
			}},
		})
		cfg.Storage.Links = append(cfg.Storage.Links, igntypes.Link{
			Node:          igntypes.Node{Path: SysextLink, Overwrite: ptr(true)},
			LinkEmbedded1: igntypes.LinkEmbedded1{Target: ptr(in.Sysext.Path()), Hard: ptr(false)},
		})
	}

	cfg.Systemd.Units = append(cfg.Systemd.Units,
		igntypes.Unit{Name: "containerd.service", Enabled: ptr(true)},
		igntypes.Unit{Name: "systemd-sysext.service", Enabled: ptr(true)},
		igntypes.Unit{Name: IgnitionJoinUnit, Enabled: ptr(true), Contents: ptr(joinUnit)},
	)
	return cfg, nil
}

// renderIgnitionJoinScript is the generated prelude (values, quoted) followed by the address
// check (shared with the cloud-init script) and ignition.sh.
func renderIgnitionJoinScript(in IgnitionInput) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	fmt.Fprintf(&b, "# prebake join for %s node %s (%s). The join token is in %s, not here.\n",
		in.Provider, in.NodeName, in.OS, JoinConfigPath)
	for _, v := range []struct{ name, value string }{
		{"PREBAKE_PROVIDER", in.Provider},
		{"PREBAKE_NODE", in.NodeName},
		{"PREBAKE_ENDPOINT", in.Cluster.APIServerEndpoint},
		{"PREBAKE_STATUS", in.Options.StatusPath},
		{"PREBAKE_SKIP_JOIN", boolFlag(in.Options.SkipJoin)},
		{"PREBAKE_PREBAKED", fmt.Sprint(in.Prebaked)},
		{"PREBAKE_SYSEXT_VERSION", in.Sysext.Version},
		{"PREBAKE_SYSEXT_PATH", in.Sysext.Path()},
		{"PREBAKE_SYSEXT_LINK", SysextLink},
		{"PREBAKE_JOIN_CONFIG", JoinConfigPath},
	} {
		fmt.Fprintf(&b, "%s=%s\n", v.name, shQuote(v.value))
	}
	writeNetcheck(&b, in.Input, KubeletEnvSysext)
	b.WriteString(ignitionJoinScript)
	return b.String()
}

func ignitionFile(path, mode, content string) (igntypes.File, error) {
	var m int
	if _, err := fmt.Sscanf(mode, "%o", &m); err != nil {
		return igntypes.File{}, fmt.Errorf("bootstrap: file %s: mode %q is not octal", path, mode)
	}
	return igntypes.File{
		Node: igntypes.Node{Path: path, Overwrite: ptr(true)},
		FileEmbedded1: igntypes.FileEmbedded1{Mode: ptr(m), Contents: igntypes.Resource{
			Source: ptr(dataURL(content)),
		}},
	}, nil
}

// dataURL embeds content in the config (RFC 2397, base64).
func dataURL(content string) string {
	return "data:;base64," + base64.StdEncoding.EncodeToString([]byte(content))
}

// validateIgnition encodes cfg and checks it with the Ignition library: v3_4.Parse decodes
// it strictly, checks the spec version and runs the validation Ignition runs at boot. Its
// report names the JSON path of each problem; the token is taken out in case a report ever
// quotes a value.
func validateIgnition(cfg igntypes.Config, token string) ([]byte, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: marshal Ignition config: %w", err)
	}
	if _, rpt, err := ign.Parse(data); err != nil {
		msg := strings.TrimSpace(rpt.String())
		if token != "" {
			msg = strings.ReplaceAll(msg, token, "<join token>")
		}
		return nil, fmt.Errorf("bootstrap: the rendered Ignition config is invalid (%v): %s", err, msg)
	}
	return data, nil
}

func ptr[T any](v T) *T { return &v }
