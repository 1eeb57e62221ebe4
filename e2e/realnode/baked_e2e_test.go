//go:build e2e

package realnode

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/e2e/wait"
)

// TestBakedImagesWithoutTheRegistry stops the local registry, the only place the nodes can
// pull pod images from, and scales up a prebaked and a vanilla group: the prebaked node runs
// its pod (the pause and workload images came from the machine image), the vanilla node, the
// control, joins but can't start its pod, for want of a registry.
func TestBakedImagesWithoutTheRegistry(t *testing.T) {
	w := needWorld(t)
	img := needPrebaked(t, w)
	s := newScenario(t, w, "nr", 30*time.Minute, ConfigOptions{Catalog: img.Catalog, Groups: []Group{
		{ID: groupVanilla, MaxSize: 1},
		{ID: groupPrebaked, MaxSize: 1, Prebaked: true},
	}})
	addr := w.registryOpts.Addr
	if err := w.StopRegistry(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.StartRegistry(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("the registry's address %s still answers after it was stopped; the test proves nothing", addr)
	}
	t.Logf("registry at %s stopped", addr)

	vanillaPod := s.createPod("pull-fails", groupVanilla, nil)
	prebakedPod := s.createPod("from-the-image", groupPrebaked, nil)
	if err := s.waitPodRunning(prebakedPod, groupPrebaked, 20*time.Minute); err != nil {
		t.Fatal(err)
	}
	if ev := s.podEvents("from-the-image", "Pulled"); len(ev) == 0 || !strings.Contains(strings.Join(ev, "\n"), "already present on machine") {
		t.Errorf("prebaked pod's Pulled events %q: want the image already present (baked)", ev)
	}
	// The control: the vanilla node has nowhere to pull the pause image from.
	var failed []string
	if err := wait.Poll(s.ctx, 20*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		if err := s.failedNode(ctx, groupVanilla); err != nil {
			t.Fatalf("the vanilla node failed to join: %v", err)
		}
		failed = append(s.podEvents("pull-fails", "FailedCreatePodSandBox"), s.podEvents("pull-fails", "Failed")...)
		return len(failed) > 0, nil
	}); err != nil {
		t.Fatalf("the vanilla node's pod %s never failed to pull with the registry stopped: %v", vanillaPod, err)
	}
	if !strings.Contains(strings.Join(failed, "\n"), RegistryName) {
		t.Errorf("the vanilla pod's failures %q do not name the registry %s", failed, RegistryName)
	}
	t.Logf("vanilla control, kubelet's words: %s", failed[0])
}
