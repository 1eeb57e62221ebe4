package realnode

import (
	"testing"
	"time"
)

// TestKubeletPull reads kubelet's own Pulled messages (v1.35's wording) and refuses the
// "already present" one and a pull that failed.
func TestKubeletPull(t *testing.T) {
	for _, tc := range []struct {
		events string
		d      time.Duration
		size   int64
		ok     bool
	}{
		{`Successfully pulled image "prebake-registry.test/prebake/large:524288000-4" in 12.345s (12.346s including waiting). Image size: 524301234 bytes.`, 12345 * time.Millisecond, 524301234, true},
		{"Container image \"x\" already present on machine\nSuccessfully pulled image \"r:1\" in 1m2.5s (1m3s including waiting). Image size: 7 bytes.", 62500 * time.Millisecond, 7, true},
		{`Successfully pulled image "r:1" in 850ms (850ms including waiting). Image size: 1024 bytes.`, 850 * time.Millisecond, 1024, true},
		{`Container image "r:1" already present on machine and can be accessed by the pod`, -1, 0, false},
		{`Failed to pull image "r:1": connection refused`, -1, 0, false},
	} {
		d, size, ok := kubeletPull(tc.events)
		if d != tc.d || size != tc.size || ok != tc.ok {
			t.Errorf("kubeletPull(%q) = %s, %d, %v; want %s, %d, %v", tc.events, d, size, ok, tc.d, tc.size, tc.ok)
		}
	}
}
