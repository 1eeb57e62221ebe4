package bootstrap

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// BuilderInput is what an image builder's user-data depends on: what to install and the
// kernel settings to bake. A builder joins no cluster, so there is no token, endpoint or node
// name, and the rendered user-data holds no secret.
type BuilderInput struct {
	// Provider is the provider that boots the builder (hcloud, gce, ...); it is recorded in
	// the install step's status file only.
	Provider string
	// Components are installed at exactly their versions (apt, or a binary with a sha256),
	// as Input.Components. At least one is required.
	Components []Component
	// Sysctls and Modules are baked as config files; nil means DefaultSysctls and
	// DefaultModules.
	Sysctls map[string]string
	Modules []string
	// Runtime is Input.Runtime: the builder configures containerd and checks the kernel
	// settings the same way a node booted from the image will.
	Runtime Runtime
	// DpkgLockWait is Options.DpkgLockWait.
	DpkgLockWait time.Duration
	// RecordHostCommands is Options.RecordHostCommands: a chroot test records sysctl,
	// modprobe and systemctl instead of running them.
	RecordHostCommands bool
	// Report is how the report leaves the builder: ReportOverSSH, ReportToGCEGuestAttribute
	// or ReportToFile. "" picks the provider's: the guest attribute on gce, the file on
	// docker, SSH elsewhere.
	Report string
	// Images are container images (references such as 172.18.0.1:5000/prebake/pause:1,
	// optionally pinned: name:tag@sha256:...) pulled into containerd's k8s.io namespace after
	// the install step configured it, so a node booted from the image has them before its
	// first pod: the pod sandbox image, say. They are pulled through containerd's registry
	// host config (Runtime.Registries), also named name@digest (and a pinned one name:tag),
	// as the CRI names an image it pulls, and recorded with their digests in the manifest
	// (Manifest.ContainerImages) and the report.
	Images []string
}

// BuilderImagesNamespace is the containerd namespace the builder pulls Images into and a
// node's images phase looks in: the CRI plugin's, where the kubelet finds them.
const BuilderImagesNamespace = "k8s.io"

// Report transports. A builder holds no credential of the cloud's, so it cannot label its
// own server; the report leaves it another way.
const (
	// ReportOverSSH: the cloud-config only installs; prebake logs in (WithSSHAccess gave it
	// the keys) and runs BuilderSealCommand, whose stdout is the report.
	ReportOverSSH = "ssh"
	// ReportToGCEGuestAttribute: the cloud-config installs, then starts a waiter that runs
	// seal once cloud-init is done and PUTs the report to the guest attribute
	// GCEReportAttribute, which prebake reads with instances.getGuestAttributes.
	ReportToGCEGuestAttribute = "gce-guest-attributes"
	// ReportToFile: the cloud-config installs, then starts the same waiter, which seals once
	// cloud-init is done and leaves the report at BuildReportPath; the provider reads it out
	// of the machine (docker: the engine's archive API on the builder container).
	ReportToFile = "file"
)

// GCEReportAttribute is the guest attribute (namespace/key) a GCE builder's report is put to.
const GCEReportAttribute = "prebake/report"

// BuilderSealCommand is what prebake runs on a builder over SSH: exit 0 with the report
// JSON, and nothing else, on stdout; exit SealNotYet while the install step or cloud-init's
// final stage is still running; anything else is a broken builder.
const BuilderSealCommand = "sh " + BuilderScriptPath + " seal"

// SealNotYet is seal's exit status while the builder is not done (EX_TEMPFAIL).
const SealNotYet = 75

// Paths of the builder, fixed so the thing that carries the report off the builder (see
// docs/images.md) and the tests know where to look.
const (
	// BuilderScriptPath is where the builder's cloud-config writes the script.
	BuilderScriptPath = "/var/lib/prebake/builder.sh"
	// BuilderStatusPath is the install step's Status (the builder is no node, so not
	// DefaultStatusPath: a node booted from the image writes that one).
	BuilderStatusPath = "/var/lib/prebake/builder-status.json"
	// BuildReportPath is where the report step writes its BuildReport.
	BuildReportPath = "/var/lib/prebake/build-report.json"
)

// BuilderRunCmd is the builder's cloud-config runcmd for a report transport: the install
// step, and for the guest attribute and the file the waiter that seals and reports once
// cloud-init is done. cloud-init goes on after a failed entry, so a failed install is still
// cleaned up and reported.
func BuilderRunCmd(report string) [][]string {
	cmds := [][]string{{"sh", BuilderScriptPath, "install"}}
	if report == ReportToGCEGuestAttribute || report == ReportToFile {
		cmds = append(cmds, []string{"sh", BuilderScriptPath, "seal-later", report})
	}
	return cmds
}

// BuilderHygieneChecks are the checks the report step makes, under imagecatalog's names
// (imagecatalog.HygieneChecks; a test keeps the two lists equal).
var BuilderHygieneChecks = []string{"ssh-host-keys", "machine-id", "cloud-init-state", "ssh-authorized-keys", "apt-cache"}

// BuildReport is what the report step writes to BuildReportPath. Its JSON is
// imagecatalog.Report's; bootstrap is a leaf package, so the shape is repeated here and an
// imagecatalog test decodes a real report into imagecatalog.Report.
type BuildReport struct {
	// Status is "done" when the install step finished, else "failed".
	Status string `json:"status"`
	// Observed is what the report step found in the image, not what was asked for.
	Observed Manifest `json:"observed"`
	// Hygiene maps each of BuilderHygieneChecks to whether it passed.
	Hygiene map[string]bool `json:"hygiene"`
}

// ParseBuildReport decodes a report file strictly: an unknown field means the builder and
// this binary disagree about the shape.
func ParseBuildReport(data []byte) (BuildReport, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r BuildReport
	if err := dec.Decode(&r); err != nil {
		return BuildReport{}, fmt.Errorf("build report %s: %w", BuildReportPath, err)
	}
	if r.Status != "done" && r.Status != "failed" {
		return BuildReport{}, fmt.Errorf("build report %s: status %q, want done or failed", BuildReportPath, r.Status)
	}
	return r, nil
}

//go:embed builder.sh
var builderScript string

// nodeMain is node.sh's last line. The builder script is node.sh's functions without it,
// then builder.sh, which calls them step by step.
const nodeMain = "prebake_main </dev/null\n"

// RenderBuilder validates in and renders an image builder's user-data: CloudConfig writes
// the script to BuilderScriptPath and runs BuilderRunCmd; Script is the same script, which
// run without an argument does install, cleanup and report (for `sh -s`). Neither holds a
// secret.
func RenderBuilder(in BuilderInput) (UserData, error) {
	ni, err := in.validate()
	if err != nil {
		return UserData{}, err
	}
	functions, ok := strings.CutSuffix(nodeScript, nodeMain)
	if !ok {
		return UserData{}, errors.New("bootstrap: node.sh does not end with " + strings.TrimSpace(nodeMain) + "; RenderBuilder depends on it")
	}
	configure, err := configureFiles(ni)
	if err != nil {
		return UserData{}, err
	}
	var b strings.Builder
	writePrelude(&b, fmt.Sprintf("prebake image builder for %s: install, then seal: clean up and report (%s). It holds no secret.",
		ni.Provider, BuildReportPath), ni, configure, nil)
	fmt.Fprintf(&b, "PREBAKE_BUILDER_IMAGES=%s\nPREBAKE_HOSTS_DIR=%s\n\n",
		shQuote(strings.Join(in.Images, " ")), shQuote(ContainerdHostsDir))
	b.WriteString(functions)
	b.WriteString(builderScript)
	script := []byte(b.String())

	cc := cloudConfig{
		WriteFiles: []writeFile{{Path: BuilderScriptPath, Owner: "root:root", Permissions: "0700", Content: string(script)}},
		RunCmd:     BuilderRunCmd(in.report()),
	}
	body, err := marshalCloudConfig(cc)
	if err != nil {
		return UserData{}, err
	}
	return UserData{CloudConfig: body, Script: script}, nil
}

func (in BuilderInput) report() string {
	switch {
	case in.Report != "":
		return in.Report
	case in.Provider == "gce":
		return ReportToGCEGuestAttribute
	case in.Provider == "docker":
		return ReportToFile
	}
	return ReportOverSSH
}

// validate checks in and returns the node Input the shared prelude is rendered from.
func (in BuilderInput) validate() (Input, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !providerName.MatchString(in.Provider) {
		bad("provider %q: want a provider name such as hcloud or gce", in.Provider)
	}
	if r := in.Report; r != "" && r != ReportOverSSH && r != ReportToGCEGuestAttribute && r != ReportToFile {
		bad("report %q: want %s, %s or %s (or empty for the provider's)", r, ReportOverSSH, ReportToGCEGuestAttribute, ReportToFile)
	}
	if len(in.Components) == 0 {
		bad("components: at least one is required (a builder with nothing to install makes no image)")
	}
	seenImage := map[string]bool{}
	for i, ref := range in.Images {
		if !imageRef.MatchString(ref) {
			bad("images[%d] %q: want an image reference such as 172.18.0.1:5000/prebake/pause:1", i, ref)
		}
		if seenImage[ref] {
			bad("images[%d] %q: listed twice", i, ref)
		}
		seenImage[ref] = true
	}
	ni := Input{
		Provider:   in.Provider,
		NodeName:   "prebake-builder",
		Components: in.Components,
		Sysctls:    in.Sysctls,
		Modules:    in.Modules,
		Runtime:    in.Runtime,
		Options: Options{DpkgLockWait: in.DpkgLockWait, RecordHostCommands: in.RecordHostCommands,
			SkipJoin: true, StatusPath: BuilderStatusPath},
	}
	ni = ni.validateInstall(bad)
	if len(errs) > 0 {
		return ni, fmt.Errorf("bootstrap builder input: %w", errors.Join(errs...))
	}
	return ni, nil
}
