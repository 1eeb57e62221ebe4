package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// bootstrapBase is staticBase with a bootstrap block from line 16 on.
const bootstrapBase = staticBase + `bootstrap:
  apiServerEndpoint: 10.0.0.1:6443
  caCertHashes: ["sha256:abababababababababababababababababababababababababababababababab"]
  components:
    - {name: containerd, version: 1.6.20~ds1-1+b1}
    - {name: kubelet, version: v1.35.4, url: "http://10.0.0.9/kubelet", sha256: cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd, path: /usr/bin/kubelet}
`

func TestParseBootstrap(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(bootstrapBase), "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Bootstrap{
		APIServerEndpoint: "10.0.0.1:6443",
		CACertHashes:      []string{"sha256:" + strings.Repeat("ab", 32)},
		TokenTTL:          d(time.Hour),
		DpkgLockWait:      d(10 * time.Minute),
		Components: []Component{
			{Name: "containerd", Version: "1.6.20~ds1-1+b1"},
			{Name: "kubelet", Version: "v1.35.4", URL: "http://10.0.0.9/kubelet", SHA256: strings.Repeat("cd", 32), Path: "/usr/bin/kubelet"},
		},
	}
	if diff := cmp.Diff(want, c.Bootstrap); diff != "" {
		t.Errorf("bootstrap (-want +got):\n%s", diff)
	}
}

func TestParseBootstrapErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"no endpoint", "apiServerEndpoint: 10.0.0.1:6443", `apiServerEndpoint: ""`, `b.yaml:16: bootstrap.apiServerEndpoint "": want host:port`},
		{"bad CA hash", `"sha256:abab`, `"md5:abab`, `b.yaml:16: bootstrap.caCertHashes[0] "md5:abab`},
		{"range version", "version: 1.6.20~ds1-1+b1", "version: '>=1.6'", `components[0] (containerd): version`},
		{"long token", "components:", "tokenTTL: 2h\n  components:", `bootstrap.tokenTTL is 2h0m0s; a join token must live more than 0 and at most 1h0m0s`},
		{"unknown field", "components:", "token: abc\n  components:", `unknown field "token" in bootstrap`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := strings.Replace(bootstrapBase, tc.old, tc.new, 1)
			if in == bootstrapBase {
				t.Fatalf("edit %q not applied", tc.old)
			}
			_, err := Parse([]byte(in), "b.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error with %q", err, tc.want)
			}
		})
	}
	empty := strings.Split(bootstrapBase, "  components:")[0]
	if _, err := Parse([]byte(empty), "b.yaml"); err == nil || !strings.Contains(err.Error(), "bootstrap.components is empty") {
		t.Errorf("Parse without components = %v, want an error naming bootstrap.components", err)
	}
}
