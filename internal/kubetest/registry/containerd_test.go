package registry

import (
	"strings"
	"testing"
)

func TestHostsTOML(t *testing.T) {
	f, err := HostsTOML("", "172.18.0.1:5000")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/etc/containerd/certs.d/172.18.0.1:5000/hosts.toml"; f.Path != want {
		t.Errorf("Path = %q, want %q", f.Path, want)
	}
	want := `# Written by prebake: the test registry at 172.18.0.1:5000 speaks plain HTTP.
# Format: https://github.com/containerd/containerd/blob/v1.6.20/docs/hosts.md
server = "http://172.18.0.1:5000"

[host."http://172.18.0.1:5000"]
  capabilities = ["pull", "resolve"]
`
	if f.Content != want {
		t.Errorf("Content:\n%s\nwant:\n%s", f.Content, want)
	}

	f, err = HostsTOML("/run/certs.d", "registry.test:5000")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/run/certs.d/registry.test:5000/hosts.toml"; f.Path != want {
		t.Errorf("Path = %q, want %q", f.Path, want)
	}
	if !strings.Contains(f.Content, `server = "http://registry.test:5000"`) {
		t.Errorf("Content lacks the http server line:\n%s", f.Content)
	}
}

func TestHostsTOMLRejects(t *testing.T) {
	for _, c := range []struct{ dir, host, want string }{
		{"", "http://10.0.0.1:5000", "without a scheme"},
		{"", "10.0.0.1", "missing port"},
		{"", "10.0.0.1:0", "not 1-65535"},
		{"", "10.0.0.1:99999", "not 1-65535"},
		{"", `a"b:5000`, "quote"},
		{"", "10.0.0.1:5000/v2", "contains '/'"},
		{"certs.d", "10.0.0.1:5000", "not an absolute path"},
	} {
		_, err := HostsTOML(c.dir, c.host)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("HostsTOML(%q, %q) = %v, want an error with %q", c.dir, c.host, err, c.want)
		}
	}
}

func TestContainerdCRIConfig(t *testing.T) {
	got, err := ContainerdCRIConfig("172.18.0.1:5000/prebake/pause:1", "")
	if err != nil {
		t.Fatal(err)
	}
	want := `[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "172.18.0.1:5000/prebake/pause:1"

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for _, c := range []struct{ image, dir, want string }{
		{"", "", "sandbox image"},
		{`x"y`, "", "sandbox image"},
		{"reg:5000/pause:1", "relative", "certs dir"},
	} {
		_, err := ContainerdCRIConfig(c.image, c.dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ContainerdCRIConfig(%q, %q) = %v, want an error naming the %s", c.image, c.dir, err, c.want)
		}
	}
}
