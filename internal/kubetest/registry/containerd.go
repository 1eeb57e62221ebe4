package registry

import (
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
)

// DefaultCertsDir is where containerd looks for registry host configs when its CRI
// registry config_path points there (the path containerd's docs use).
const DefaultCertsDir = "/etc/containerd/certs.d"

// HostsFile is one registry host config file for containerd.
type HostsFile struct {
	// Path is <certs dir>/<host:port>/hosts.toml.
	Path    string
	Content string
}

// HostsTOML renders containerd's registry host config for the plain-HTTP registry at host
// (host:port, no scheme), to be written at its Path under certsDir (empty means
// DefaultCertsDir). The format is containerd 1.6's, Debian bookworm's containerd:
// https://github.com/containerd/containerd/blob/v1.6.20/docs/hosts.md — the directory is the
// registry host namespace [host][:port]; `server` with an http:// scheme makes containerd
// use plain HTTP for it, which it otherwise does only for localhost; `capabilities` omits
// push, since nodes only pull.
func HostsTOML(certsDir, host string) (HostsFile, error) {
	if err := checkHostPort(host); err != nil {
		return HostsFile{}, err
	}
	if certsDir == "" {
		certsDir = DefaultCertsDir
	}
	if !path.IsAbs(certsDir) {
		return HostsFile{}, fmt.Errorf("containerd certs dir %q is not an absolute path; pass one such as %s", certsDir, DefaultCertsDir)
	}
	url := "http://" + host
	content := fmt.Sprintf(`# Written by prebake: the test registry at %[1]s speaks plain HTTP.
# Format: https://github.com/containerd/containerd/blob/v1.6.20/docs/hosts.md
server = %[2]s

[host.%[2]s]
  capabilities = ["pull", "resolve"]
`, host, strconv.Quote(url))
	return HostsFile{Path: path.Join(certsDir, host, "hosts.toml"), Content: content}, nil
}

// checkHostPort accepts host:port with a hostname, an IPv4 address or a bracketed IPv6
// address, and a port in 1–65535.
func checkHostPort(hostport string) error {
	fix := "pass host:port without a scheme, for example 172.18.0.1:5000"
	if strings.Contains(hostport, "/") {
		return fmt.Errorf("registry host %q contains '/'; %s", hostport, fix)
	}
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("registry host %q: %v; %s", hostport, err, fix)
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("registry host %q: port %q is not 1-65535; %s", hostport, p, fix)
	}
	if h == "" || strings.ContainsAny(h, "\"\\ \t\n") {
		return fmt.Errorf("registry host %q: empty host or a quote, backslash or space in it; %s", hostport, fix)
	}
	return nil
}

// ContainerdCRIConfig renders the lines of containerd's config.toml (version 2, which
// containerd 1.6 reads) that make the CRI plugin use sandboxImage as the pod sandbox (pause)
// image and read registry host configs from certsDir (empty means DefaultCertsDir):
//
//	[plugins."io.containerd.grpc.v1.cri"]
//	  sandbox_image = "<sandboxImage>"
//
//	[plugins."io.containerd.grpc.v1.cri".registry]
//	  config_path = "<certsDir>"
//
// They go into the node's one config.toml, beside bootstrap's runc tables (which define
// neither of these two tables; TOML forbids defining a table twice). They cannot go into a
// separate file named by `imports`: containerd 1.6 replaces a whole plugin section with the
// imported one (services/server/config/config.go, mergeConfig), which would drop the runc
// settings. Keys: containerd v1.6.20 pkg/cri/config/config.go (sandbox_image, config_path)
// and docs/hosts.md.
func ContainerdCRIConfig(sandboxImage, certsDir string) (string, error) {
	if sandboxImage == "" || strings.ContainsAny(sandboxImage, "\"\\ \t\n") {
		return "", fmt.Errorf("containerd sandbox image %q is empty or has a quote, backslash or space; pass a reference such as 172.18.0.1:5000/prebake/pause:1", sandboxImage)
	}
	if certsDir == "" {
		certsDir = DefaultCertsDir
	}
	if !path.IsAbs(certsDir) || strings.ContainsAny(certsDir, "\"\\\n") {
		return "", fmt.Errorf("containerd certs dir %q is not a plain absolute path; pass one such as %s", certsDir, DefaultCertsDir)
	}
	return fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %s

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = %s
`, strconv.Quote(sandboxImage), strconv.Quote(certsDir)), nil
}
