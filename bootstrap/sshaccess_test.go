package bootstrap

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"
)

func testSSHAccess(t *testing.T) SSHAccess {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	return SSHAccess{HostKeyPrivate: string(pem.EncodeToMemory(block)), HostKeyPublic: line, AuthorizedKey: line + " prebake-builder"}
}

// TestWithSSHAccess: the keys land in cloud-init's own keys, the builder's files and
// commands are kept as they were, and a user-data that cloud-init would read otherwise is
// refused naming why.
func TestWithSSHAccess(t *testing.T) {
	t.Parallel()
	ud, err := RenderBuilder(validBuilderInput())
	if err != nil {
		t.Fatal(err)
	}
	access := testSSHAccess(t)
	out, err := WithSSHAccess(ud.CloudConfig, access)
	if err != nil {
		t.Fatal(err)
	}
	body, ok := strings.CutPrefix(string(out), "#cloud-config\n")
	if !ok {
		t.Fatalf("merged user-data is no #cloud-config:\n%.80s", out)
	}
	var got struct {
		cloudConfig `yaml:",inline"`
		DeleteKeys  bool              `yaml:"ssh_deletekeys"`
		Keys        map[string]string `yaml:"ssh_keys"`
		DisableRoot *bool             `yaml:"disable_root"`
		Authorized  []string          `yaml:"ssh_authorized_keys"`
	}
	if err := yaml.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if _, err := ssh.ParsePrivateKey([]byte(got.Keys["ed25519_private"])); err != nil {
		t.Errorf("ssh_keys.ed25519_private does not parse: %v", err)
	}
	if got.Keys["ed25519_public"] != access.HostKeyPublic || !got.DeleteKeys {
		t.Errorf("ssh_keys %v, ssh_deletekeys %v; want the host key, and the image's deleted", got.Keys, got.DeleteKeys)
	}
	if got.DisableRoot == nil || *got.DisableRoot || !cmp.Equal(got.Authorized, []string{access.AuthorizedKey}) {
		t.Errorf("disable_root %v, ssh_authorized_keys %q; want false and prebake's key", got.DisableRoot, got.Authorized)
	}
	var before cloudConfig
	if err := yaml.Unmarshal(ud.CloudConfig[len("#cloud-config\n"):], &before); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, got.cloudConfig); d != "" {
		t.Errorf("the builder's files and commands changed (-before +after):\n%s", d)
	}

	for _, tc := range []struct{ name, userData, want string }{
		{"shell script", "#!/bin/sh\necho hi\n", "not a #cloud-config"},
		{"own host keys", "#cloud-config\nssh_keys:\n  rsa_private: x\n", "sets ssh_keys itself"},
		{"own root setting", "#cloud-config\ndisable_root: true\n", "sets disable_root itself"},
		{"bad yaml", "#cloud-config\n: [\n", "builder user-data"},
	} {
		if _, err := WithSSHAccess([]byte(tc.userData), access); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := WithSSHAccess(ud.CloudConfig, SSHAccess{HostKeyPublic: "x"}); err == nil {
		t.Error("SSH access without keys accepted")
	}
}
