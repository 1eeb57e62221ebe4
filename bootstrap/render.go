package bootstrap

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// UserData is one node's rendered bootstrap. Both fields hold the join token: never log them.
type UserData struct {
	// CloudConfig is "#cloud-config" user-data: write_files puts Script at ScriptPath (mode
	// 0700, root only) and runcmd runs it once.
	CloudConfig []byte
	// Script is the same node script standalone, for machines without cloud-init: the static
	// provider pipes it to `sh -s` over SSH.
	Script []byte
}

// String keeps a stray %v or slog call from printing the secret.
func (UserData) String() string { return "bootstrap.UserData{<redacted: holds a join token>}" }

//go:embed node.sh
var nodeScript string

// CRISocket is containerd's socket; kubeadm and the kubelet talk to it.
const CRISocket = "unix:///run/containerd/containerd.sock"

// Render validates in and renders its user-data. The error names every invalid field and
// never contains the join token.
func Render(in Input) (UserData, error) {
	in, err := in.validate()
	if err != nil {
		return UserData{}, err
	}
	script, err := renderScript(in)
	if err != nil {
		return UserData{}, err
	}
	cc, err := renderCloudConfig(script)
	if err != nil {
		return UserData{}, err
	}
	return UserData{CloudConfig: cc, Script: script}, nil
}

// shQuote quotes s for POSIX sh: inside single quotes only the single quote is special.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func boolFlag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// renderScript is the generated prelude (values, quoted) followed by node.sh (logic, fixed).
func renderScript(in Input) ([]byte, error) {
	configure, err := configureFiles(in)
	if err != nil {
		return nil, err
	}
	var kubelet []file
	header := fmt.Sprintf("prebake node bootstrap for %s node %s. It holds a join token: do not log or share it.",
		in.Provider, in.NodeName)
	if in.Options.Standby {
		// Nothing of the join: the user-data it gets when it is taken has it.
		header = fmt.Sprintf("prebake warm-pool standby for %s node %s: prepare up to the join, then stop. It holds no secret.",
			in.Provider, in.NodeName)
	} else if kubelet, err = kubeletFiles(in); err != nil {
		return nil, err
	}
	var b strings.Builder
	writePrelude(&b, header, in, configure, kubelet)
	writeFileFunc(&b, "prebake_standby_files", standbyFiles(in))
	writeNetcheck(&b, in, KubeletEnvDebian)
	b.WriteString(nodeScript)
	return []byte(b.String()), nil
}

// writePrelude writes the shell header, the quoted values and the generated functions that
// node.sh (and builder.sh after it) call: prebake_components, prebake_configure_files and
// prebake_kubelet_files.
func writePrelude(b *strings.Builder, header string, in Input, configure, kubelet []file) {
	b.WriteString("#!/bin/sh\n")
	fmt.Fprintf(b, "# %s\n", header)
	vars := []struct{ name, value string }{
		{"PREBAKE_PROVIDER", in.Provider},
		{"PREBAKE_NODE", in.NodeName},
		{"PREBAKE_ENDPOINT", in.Cluster.APIServerEndpoint},
		{"PREBAKE_STATUS", in.Options.StatusPath},
		{"PREBAKE_LOCK_WAIT", fmt.Sprint(int64(in.Options.DpkgLockWait.Seconds() + 0.999))},
		{"PREBAKE_RECORD", boolFlag(in.Options.RecordHostCommands)},
		{"PREBAKE_SKIP_JOIN", boolFlag(in.Options.SkipJoin)},
		{"PREBAKE_STANDBY", boolFlag(in.Options.Standby)},
		{"PREBAKE_STANDBY_RESUME", string(in.StandbyResume)},
		{"PREBAKE_FIXED_PROVIDER_ID", boolFlag(in.ProviderID != "")},
		{"PREBAKE_KUBELET_PATCH", KubeletPatchPath},
		{"PREBAKE_MODULES", strings.Join(in.Modules, " ")},
		{"PREBAKE_SYSCTLS_JSON", mustJSON(in.Sysctls)},
		{"PREBAKE_MODULES_JSON", mustJSON(in.Modules)},
		{"PREBAKE_SHARED_KERNEL", boolFlag(in.Runtime.SharedKernel)},
		{"PREBAKE_POD_NETWORK", boolFlag(in.Runtime.PodNetwork != nil)},
		{"PREBAKE_IMAGES_NAMESPACE", BuilderImagesNamespace},
	}
	if pn := in.Runtime.PodNetwork; pn != nil {
		vars = append(vars, []struct{ name, value string }{
			{"PREBAKE_CNI_BRIDGE", pn.Bridge},
			{"PREBAKE_CNI_MASQ", fmt.Sprint(pn.Masquerade)},
			{"PREBAKE_POD_CIDR_WAIT", fmt.Sprint(int64(pn.Wait.Seconds() + 0.999))},
			{"PREBAKE_CNI_CONFIG", CNIConfigPath},
		}...)
	}
	for _, v := range vars {
		fmt.Fprintf(b, "%s=%s\n", v.name, shQuote(v.value))
	}

	b.WriteString("\nprebake_components() {\n")
	for _, c := range in.Components {
		kind := "apt"
		if c.Binary() {
			kind = "bin"
		}
		fmt.Fprintf(b, "\tcomponent %s %s %s %s %s %s %s\n", kind, shQuote(c.Name), shQuote(c.Version),
			shQuote(c.aptPackage()), shQuote(c.URL), shQuote(c.SHA256), shQuote(c.Path))
	}
	b.WriteString("\t:\n}\n")

	writeFileFunc(b, "prebake_configure_files", configure)
	writeFileFunc(b, "prebake_kubelet_files", kubelet)
	b.WriteString("\n")
}

// file is one file the script puts on the node; action names the host command that applies
// it when it changed (see put_file in node.sh).
type file struct {
	path, mode, action, content string
}

func writeFileFunc(b *strings.Builder, name string, files []file) {
	fmt.Fprintf(b, "\n%s() {\n", name)
	for _, f := range files {
		fmt.Fprintf(b, "\tput_file %s %s %s %s\n", shQuote(f.path), f.mode, f.action, shQuote(f.content))
	}
	b.WriteString("\t:\n}\n")
}

func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps and slices of strings always marshal
	}
	return string(data)
}

// containerdConfig is a version 2 config, which containerd 1.6, 1.7 and 2.x read. The
// kubelet's default cgroup driver under kubeadm is systemd, so runc must use it too.
const containerdConfig = `version = 2

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
`

// kubeletUnit and kubeletDropIn are what the kubelet and kubeadm Debian packages install;
// a kubelet installed as a binary needs them written.
const kubeletUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=%s
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`

const kubeletDropIn = `[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=%s $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`

func configureFiles(in Input) ([]file, error) {
	var sysctl strings.Builder
	sysctl.WriteString("# Written by prebake bootstrap: what a kubeadm node with a CNI needs.\n")
	for _, k := range slices.Sorted(maps.Keys(in.Sysctls)) {
		fmt.Fprintf(&sysctl, "%s = %s\n", k, in.Sysctls[k])
	}
	modules := "# Written by prebake bootstrap.\n" + strings.Join(in.Modules, "\n") + "\n"
	files := []file{
		{"/etc/modules-load.d/prebake.conf", "0644", "modules", modules},
		{"/etc/sysctl.d/99-prebake.conf", "0644", "sysctl", sysctl.String()},
		{"/etc/containerd/config.toml", "0644", "containerd", containerdConfigFor(in.Runtime)},
	}
	files = append(files, registryFiles(in.Runtime)...)
	for _, c := range in.Components {
		if c.Name == "kubelet" && c.Binary() {
			files = append(files,
				file{"/etc/systemd/system/kubelet.service", "0644", "kubelet-unit", fmt.Sprintf(kubeletUnit, c.Path)},
				file{"/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", "0644", "kubelet-unit", fmt.Sprintf(kubeletDropIn, c.Path)})
		}
	}
	return files, nil
}

// The kubeadm v1beta4 types we write, with only the fields we set.
type (
	joinConfiguration struct {
		APIVersion       string           `yaml:"apiVersion"`
		Kind             string           `yaml:"kind"`
		Discovery        discovery        `yaml:"discovery"`
		NodeRegistration nodeRegistration `yaml:"nodeRegistration"`
		Patches          patches          `yaml:"patches"`
	}
	discovery struct {
		BootstrapToken bootstrapTokenDiscovery `yaml:"bootstrapToken"`
	}
	bootstrapTokenDiscovery struct {
		APIServerEndpoint string   `yaml:"apiServerEndpoint"`
		Token             string   `yaml:"token"`
		CACertHashes      []string `yaml:"caCertHashes"`
	}
	nodeRegistration struct {
		Name             string   `yaml:"name"`
		CRISocket        string   `yaml:"criSocket"`
		Taints           []taint  `yaml:"taints"` // an empty list means none: kubeadm adds no default to a joining worker
		KubeletExtraArgs []argVal `yaml:"kubeletExtraArgs,omitempty"`
		// IgnorePreflightErrors is Runtime.IgnorePreflightErrors.
		IgnorePreflightErrors []string `yaml:"ignorePreflightErrors,omitempty"`
	}
	taint struct {
		Key    string `yaml:"key"`
		Value  string `yaml:"value,omitempty"`
		Effect string `yaml:"effect"`
	}
	argVal struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	}
	patches struct {
		Directory string `yaml:"directory"`
	}
)

// KubeadmPatchesDir holds the kubelet configuration patch that sets the providerID. kubeadm
// join downloads the cluster's KubeletConfiguration and applies this patch on top.
const KubeadmPatchesDir = "/etc/prebake/kubeadm-patches"

// KubeletPatchPath is the patch itself: a JSON merge patch of the KubeletConfiguration.
const KubeletPatchPath = KubeadmPatchesDir + "/kubeletconfiguration+merge.yaml"

func kubeletFiles(in Input) ([]file, error) {
	jc := joinConfiguration{
		APIVersion: "kubeadm.k8s.io/v1beta4",
		Kind:       "JoinConfiguration",
		Discovery: discovery{BootstrapToken: bootstrapTokenDiscovery{
			APIServerEndpoint: in.Cluster.APIServerEndpoint,
			Token:             in.JoinToken,
			CACertHashes:      in.Cluster.CACertHashes,
		}},
		NodeRegistration: nodeRegistration{Name: in.NodeName, CRISocket: CRISocket, Taints: []taint{},
			IgnorePreflightErrors: in.Runtime.IgnorePreflightErrors},
		Patches: patches{Directory: KubeadmPatchesDir},
	}
	for _, t := range in.Taints {
		jc.NodeRegistration.Taints = append(jc.NodeRegistration.Taints, taint(t))
	}
	if len(in.Labels) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(in.Labels)) {
			kv = append(kv, k+"="+in.Labels[k])
		}
		jc.NodeRegistration.KubeletExtraArgs = []argVal{{Name: "node-labels", Value: strings.Join(kv, ",")}}
	}
	join, err := yaml.Marshal(jc)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: marshal JoinConfiguration: %w", err)
	}
	files := []file{
		// 0600: it holds the join token.
		{"/etc/prebake/kubeadm-join.yaml", "0600", "none", string(join)},
	}
	if in.ProviderID != "" {
		patch, err := yaml.Marshal(map[string]string{"providerID": in.ProviderID})
		if err != nil {
			return nil, fmt.Errorf("bootstrap: marshal kubelet patch: %w", err)
		}
		files = append(files, file{KubeletPatchPath, "0644", "none", string(patch)})
	}
	runtimePatch, err := kubeletRuntimePatch(in.Runtime)
	if err != nil {
		return nil, err
	}
	files = append(files, runtimePatch...)
	// Without a providerID here, node.sh writes the patch at boot (phase_kubelet).
	return files, nil
}

type cloudConfig struct {
	WriteFiles []writeFile `yaml:"write_files"`
	RunCmd     [][]string  `yaml:"runcmd"`
}

type writeFile struct {
	Path        string `yaml:"path"`
	Owner       string `yaml:"owner"`
	Permissions string `yaml:"permissions"`
	Content     string `yaml:"content"`
}

func renderCloudConfig(script []byte) ([]byte, error) {
	return marshalCloudConfig(cloudConfig{
		WriteFiles: []writeFile{{Path: ScriptPath, Owner: "root:root", Permissions: "0700", Content: string(script)}},
		RunCmd:     [][]string{{"sh", ScriptPath}},
	})
}

func marshalCloudConfig(cc cloudConfig) ([]byte, error) {
	body, err := yaml.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: marshal cloud-config: %w", err)
	}
	return append([]byte("#cloud-config\n"), body...), nil
}
