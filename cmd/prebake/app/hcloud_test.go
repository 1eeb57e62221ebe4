package app

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// TestServeHcloudExample runs `prebake serve` on examples/hcloud.yaml with
// the endpoint pointed at the fake Hetzner API, and drives it the way CA
// does: scale a group 0 → 3 → 1, then fail a create with
// resource_unavailable.
func TestServeHcloudExample(t *testing.T) {
	t.Setenv("HCLOUD_TOKEN", "serve-test-token")
	f := hcloudfake.New(hcloudfake.Options{Token: "serve-test-token"})
	t.Cleanup(f.Close)
	example, err := os.ReadFile("../../../examples/hcloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const commented = "# endpoint: https://api.hetzner.cloud/v1"
	if !strings.Contains(string(example), commented) {
		t.Fatalf("examples/hcloud.yaml lost the line %q the test points at the fake", commented)
	}
	cfg := strings.Replace(string(example), commented, "endpoint: "+f.URL(), 1)

	ctx := t.Context()
	c := serveConfig(t, cfg)
	nodes, until := c.nodes, func(what string, cond func() bool) { t.Helper(); c.until(what, 15*time.Second, cond) }

	if _, err := c.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "cx-fsn1", Delta: 3}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	until("3 hcloud instances", func() bool {
		ids = ids[:0]
		for _, in := range nodes("cx-fsn1") {
			if strings.HasPrefix(in.GetId(), "hcloud://") {
				ids = append(ids, in.GetId())
			}
		}
		return len(ids) == 3 && len(f.Servers()) == 3
	})
	if _, err := c.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "cx-fsn1", Nodes: []*protos.ExternalGrpcNode{
		{ProviderID: ids[0], Name: "n0"}, {ProviderID: ids[1], Name: "n1"},
	}}); err != nil {
		t.Fatal(err)
	}
	until("1 server", func() bool { return len(f.Servers()) == 1 })
	s := f.Servers()[0]
	if got := "hcloud://" + strconv.FormatInt(s.ID, 10); got != ids[2] {
		t.Fatalf("server left is %s, want %s", got, ids[2])
	}
	if s.Labels[providers.LabelCluster] != "demo" || s.Labels[providers.LabelGroup] != "cx-fsn1" ||
		s.Labels[providers.LabelMachine] != s.Name || s.ServerType != "cx22" || s.Location != "fsn1" || s.Image != "ubuntu-24.04" {
		t.Fatalf("server left = %+v", s)
	}
	if ts, err := c.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: "cx-fsn1"}); err != nil || ts.GetTargetSize() != 1 {
		t.Fatalf("target size = %v, %v; want 1", ts, err)
	}

	f.Fail(http.MethodPost, "/servers", 1, hcloudfake.ErrResourceUnavailable)
	if _, err := c.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "cx-nbg1", Delta: 1}); err != nil {
		t.Fatal(err)
	}
	var failed *protos.Instance
	until("a creation error", func() bool {
		for _, in := range nodes("cx-nbg1") {
			if in.GetStatus().GetErrorInfo() != nil {
				failed = in
				return true
			}
		}
		return false
	})
	ei := failed.GetStatus().GetErrorInfo()
	if ei.GetInstanceErrorClass() != int32(providers.ErrorOutOfResources) || ei.GetErrorCode() != "resource_unavailable" ||
		failed.GetStatus().GetInstanceState() != protos.InstanceStatus_instanceCreating {
		t.Fatalf("failed instance = %v, want creating with OutOfResources resource_unavailable", failed)
	}
}
