package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// SSHAccess is what a builder's cloud-config needs so prebake can log in to it and nobody
// else can be mistaken for it: the host key sshd is to use (made by prebake for this one
// builder, so the first connection is already pinned) and the key prebake logs in with.
type SSHAccess struct {
	// HostKeyPrivate is the ed25519 host key in OpenSSH PEM form; HostKeyPublic its
	// authorized_keys line.
	HostKeyPrivate string
	HostKeyPublic  string
	// AuthorizedKey is the authorized_keys line of prebake's client key for root.
	AuthorizedKey string
}

// WithSSHAccess merges access into a #cloud-config builder user-data, through cloud-init's
// own modules: ssh_keys (the host key; ssh_deletekeys drops the image's), ssh_authorized_keys
// with disable_root false (cloud-init then gives root the key with no forced command). The
// builder's seal step removes both before the image is taken. The result holds a private key:
// never log it. A user-data that is no cloud-config, or that already sets one of these keys,
// is refused: the builder would come up with access nobody can check.
func WithSSHAccess(userData []byte, access SSHAccess) ([]byte, error) {
	body, ok := bytes.CutPrefix(userData, []byte("#cloud-config\n"))
	if !ok {
		return nil, errors.New("bootstrap: builder user-data is not a #cloud-config: prebake gives the builder its SSH keys through cloud-config; render it with bootstrap's builder (a recipe without userDataFile) or make userDataFile a #cloud-config")
	}
	if access.HostKeyPrivate == "" || access.HostKeyPublic == "" || access.AuthorizedKey == "" {
		return nil, errors.New("bootstrap: SSH access needs a host key (private and public) and an authorized key")
	}
	var cc map[string]any
	if err := yaml.Unmarshal(body, &cc); err != nil {
		return nil, fmt.Errorf("bootstrap: builder user-data: %w", err)
	}
	if cc == nil {
		cc = map[string]any{}
	}
	for _, k := range []string{"ssh_keys", "ssh_authorized_keys", "disable_root", "ssh_deletekeys"} {
		if _, set := cc[k]; set {
			return nil, fmt.Errorf("bootstrap: builder user-data sets %s itself; prebake sets the builder's SSH access: remove it", k)
		}
	}
	cc["ssh_deletekeys"] = true
	cc["ssh_keys"] = map[string]string{
		"ed25519_private": strings.TrimSpace(access.HostKeyPrivate) + "\n",
		"ed25519_public":  strings.TrimSpace(access.HostKeyPublic),
	}
	cc["disable_root"] = false
	cc["ssh_authorized_keys"] = []string{strings.TrimSpace(access.AuthorizedKey)}
	out, err := yaml.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: builder user-data: %w", err)
	}
	return append([]byte("#cloud-config\n"), out...), nil
}
