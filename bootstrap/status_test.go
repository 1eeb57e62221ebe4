package bootstrap

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestManifestShape reads the JSON imagecatalog.Manifest marshals to (json.Marshal of
// DefaultManifest-like content), so a drift in field names shows up here.
func TestManifestShape(t *testing.T) {
	t.Parallel()
	imagecatalogJSON := `{"components":{"containerd":"1.6.20~ds1-1+b1","kubelet":"v1.35.4"},"sysctls":{"net.ipv4.ip_forward":"1"},"modules":["br_netfilter","overlay"],"unattendedUpgradesDisabled":true,"containerImages":{"registry.k8s.io/pause:3.10":"sha256:0123"}}`
	m, err := ParseManifest([]byte(imagecatalogJSON))
	if err != nil {
		t.Fatal(err)
	}
	want := Manifest{
		Components:                 map[string]string{"containerd": "1.6.20~ds1-1+b1", "kubelet": "v1.35.4"},
		Sysctls:                    map[string]string{"net.ipv4.ip_forward": "1"},
		Modules:                    []string{"br_netfilter", "overlay"},
		UnattendedUpgradesDisabled: true,
		ContainerImages:            map[string]string{"registry.k8s.io/pause:3.10": "sha256:0123"},
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("manifest (-want +got):\n%s", diff)
	}
	if _, err := ParseManifest([]byte("{")); err == nil {
		t.Errorf("ParseManifest of broken JSON: want an error")
	}
}

func TestParseStatus(t *testing.T) {
	t.Parallel()
	s, err := ParseStatus([]byte(`{"version":1,"provider":"gce","node":"n","result":"ok","prebaked":true,"installed":[],"alreadyPresent":["kubelet"],"totalMs":120,"phases":[{"name":"install","ms":3,"result":"skipped","detail":"nothing to install"}],"error":""}`))
	if err != nil {
		t.Fatal(err)
	}
	ph, ok := s.Phase("install")
	if !ok || ph.Result != "skipped" || ph.Duration().Milliseconds() != 3 || !s.Prebaked {
		t.Errorf("status = %+v", s)
	}
	if _, err := ParseStatus([]byte(`{"version":2}`)); err == nil {
		t.Errorf("version 2: want an error")
	}
}
