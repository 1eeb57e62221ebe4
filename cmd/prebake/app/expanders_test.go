package app

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// unpricedConfig has one priced group and one whose machine type has no
// price.
const unpricedConfig = `apiVersion: prebake.dev/v1alpha1
kind: ProviderConfig
clusterName: t
providers:
  kwok:
    machineTypes:
      - {name: priced, cpu: "2", memory: 4Gi, pricePerHour: 0.01}
      - {name: free, cpu: "2", memory: 4Gi}
nodeGroups:
  - {id: small, provider: kwok, maxSize: 3, machineType: priced, location: zone-a}
  - {id: nopay, provider: kwok, maxSize: 3, machineType: free, location: zone-a}
`

// Told that CA runs the price expander, serve refuses a config with an
// unpriced group before it listens, naming the group and the fix.
func TestCAExpanderPriceNeedsEveryGroupPriced(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	err := Run(t.Context(), Options{ConfigPath: writeConfig(t, unpricedConfig), Listen: freeAddr(t), ShutdownTimeout: time.Second,
		CAExpander: "price,least-waste", Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		t.Fatal("Run started with an unpriced group under --ca-expander=price")
	}
	for _, want := range []string{"--ca-expander price,least-waste", "nopay", "pricePerHour", "providers.kwok.machineTypes", "drop price from cluster-autoscaler's --expander"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "small (") {
		t.Errorf("error %q names the priced group", err)
	}
}

// Without --ca-expander, serve starts and says which expanders work; when
// price does not, it names the unpriced group and both fixes: the field
// the kwok provider declares, or CA without price.
func TestServeLogsExpanderSupport(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"unpriced", unpricedConfig, []string{"price does not", "nopay", "pricePerHour", "providers.kwok.machineTypes", "drop price from cluster-autoscaler's --expander"}},
		{"priced", goodConfig, []string{"price included"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs safeBuffer
			_, stop := startServer(t, Options{ConfigPath: writeConfig(t, tc.config), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("logs do not say %q:\n%s", want, logs.String())
				}
			}
		})
	}
	// Told the expanders and able to serve them, it starts.
	_, stop := startServer(t, Options{ConfigPath: writeConfig(t, goodConfig), CAExpander: "price,least-waste", Logger: slog.New(slog.DiscardHandler)})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// safeBuffer is a bytes.Buffer the server's goroutines may log into while
// the test reads it.
type safeBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
