//go:build e2e

package canary_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/autoscaling/canary"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/internal/kubetest"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/kwok"
)

// TestJoinCanaryKwokAgainstAPIServer runs the canary with the real kwok
// provider against the hermetic control plane: the machine of the
// example catalog's stable image becomes a Node that kwok keeps Ready, the
// canary passes, and no Lease or Node is left. Run it with:
//
//	go test -tags e2e -run JoinCanaryKwok -v ./autoscaling/canary/ -timeout 40m
func TestJoinCanaryKwokAgainstAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	_, cs := kubetest.StartTest(ctx, t)
	cat, _, err := imagecatalog.FileStore{Path: "../../examples/kwok-catalog.yaml"}.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := imagecatalog.Resolve(cat, imagecatalog.Query{Channel: imagecatalog.ChannelStable, Key: imagecatalog.Key{
		OS: imagecatalog.Any, K8sMinor: imagecatalog.Any, Arch: "amd64", Provider: "kwok", Location: imagecatalog.Any}})
	if err != nil {
		t.Fatal(err)
	}
	im, _ := cat.Image(id)

	p, err := kwok.New(kwok.Options{Client: cs, Cluster: "e2e", Namespace: "prebake-kwok",
		Boot: kwok.BootProfile{Prebaked: 200 * time.Millisecond, RuntimeInstall: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	core, err := autoscaling.New(ctx, autoscaling.Options{
		Cluster:   "e2e",
		Providers: map[string]providers.Provider{"kwok": p},
		Groups:    []autoscaling.GroupSpec{{ID: "small", Provider: "kwok", MaxSize: 2, MachineType: "kwok-small", Zone: "z1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = core.Shutdown(sctx)
	})
	c, err := canary.New(core, cs, "small", canary.Options{Timeout: 2 * time.Minute, Poll: 100 * time.Millisecond, Progress: kubetest.TestLog{T: t}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(ctx, im); err != nil {
		t.Fatalf("canary on %s: %v", im.ID, err)
	}

	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: providers.LabelCluster + "=e2e"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.DeletionTimestamp == nil {
			t.Errorf("Node %s left behind", n.Name)
		}
	}
	var leases *coordinationv1.LeaseList
	if leases, err = cs.CoordinationV1().Leases("prebake-kwok").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(leases.Items) != 0 {
		t.Errorf("%d machine records (Leases) left behind", len(leases.Items))
	}
	if n, _ := core.TargetSize("small"); n != 0 {
		t.Errorf("target size %d after the canary, want 0", n)
	}
}
