package app

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers/gce/gcefake"
)

// TestServeGceExample runs `prebake serve` on examples/gce.yaml with the
// endpoint pointed at the fake Compute Engine API, and drives it the way CA
// does: scale a group 0 → 2 → 0. The fake's request log then shows that
// every call came from the real compute client library, and which
// endpoints the provider uses.
func TestServeGceExample(t *testing.T) {
	f := gcefake.New(gcefake.Options{Project: "my-project", OperationDelay: 50 * time.Millisecond})
	t.Cleanup(f.Close)
	example, err := os.ReadFile("../../../examples/gce.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const commented = "# endpoint: https://compute.googleapis.com"
	if !strings.Contains(string(example), commented) {
		t.Fatalf("examples/gce.yaml lost the line %q the test points at the fake", commented)
	}
	cfg := strings.Replace(string(example), commented, "endpoint: "+f.URL(), 1)
	// A shorter snapshot TTL than the example's, so the test needn't wait
	// 10s for the List that shows the instances running.
	if !strings.Contains(cfg, "refreshInterval: 10s") {
		t.Fatal("examples/gce.yaml lost its refreshInterval: 10s")
	}
	cfg = strings.Replace(cfg, "refreshInterval: 10s", "refreshInterval: 200ms", 1)

	ctx := t.Context()
	c := serveConfig(t, cfg)
	nodes, until := c.nodes, func(what string, cond func() bool) { t.Helper(); c.until(what, 15*time.Second, cond) }
	const group = "e2-west4-a"
	if _, err := c.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: group, Delta: 2}); err != nil {
		t.Fatal(err)
	}
	// The providerIDs are final from the start: the names are ours.
	var ids []string
	for _, in := range nodes(group) {
		ids = append(ids, in.GetId())
	}
	idRE := regexp.MustCompile(`^gce://my-project/europe-west4-a/e2-west4-a-[a-z0-9-]+$`)
	if len(ids) != 2 || !idRE.MatchString(ids[0]) || !idRE.MatchString(ids[1]) {
		t.Fatalf("instances right after IncreaseSize = %v, want 2 gce://my-project/europe-west4-a/e2-west4-a-… ids", ids)
	}
	until("2 running instances", func() bool {
		running := 0
		for _, in := range nodes(group) {
			if in.GetStatus().GetInstanceState() == protos.InstanceStatus_instanceRunning {
				running++
			}
		}
		return running == 2 && len(f.Instances()) == 2
	})
	for _, in := range f.Instances() {
		id := "gce://" + in.Project + "/" + in.Zone + "/" + in.Name
		if !slices.Contains(ids, id) {
			t.Errorf("fake instance %s is not one of %v", id, ids)
		}
		want := map[string]string{"prebake-dev_cluster": "demo", "prebake-dev_group": group, "prebake-dev_machine": in.Name, "prebake-dev_image-kind": "runtime-install"}
		if d := cmp.Diff(want, in.Labels); d != "" {
			t.Errorf("instance %s labels (-want +got):\n%s", in.Name, d)
		}
		if in.MachineType != "e2-standard-2" || in.SourceImage != "projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-amd64-v20261101" {
			t.Errorf("instance %s = %+v, want e2-standard-2 booted from the newest ubuntu-2404-lts-amd64", in.Name, in)
		}
	}

	if _, err := c.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: group, Nodes: []*protos.ExternalGrpcNode{
		{ProviderID: ids[0], Name: "n0"}, {ProviderID: ids[1], Name: "n1"},
	}}); err != nil {
		t.Fatal(err)
	}
	until("0 instances", func() bool { return len(f.Instances()) == 0 && len(nodes(group)) == 0 })
	if ts, err := c.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: group}); err != nil || ts.GetTargetSize() != 0 {
		t.Fatalf("target size = %v, %v; want 0", ts, err)
	}

	// Every request came through the real compute REST client: gax names
	// the library in x-goog-api-client (gapic/<version> … rest/…).
	reqs := f.Requests()
	hit := map[string]int{}
	for _, r := range reqs {
		if !strings.Contains(r.APIClient, "gapic/") || !strings.Contains(r.APIClient, "rest/") {
			t.Errorf("%s %s came with x-goog-api-client %q, User-Agent %q; want the compute client library's", r.Method, r.Path, r.APIClient, r.UserAgent)
		}
		hit[r.Method+" "+route(r.Path)]++
	}
	var endpoints []string
	for k := range hit {
		endpoints = append(endpoints, k)
	}
	slices.Sort(endpoints)
	want := []string{
		"DELETE zones/{zone}/instances/{name}",
		"GET aggregated/instances",
		"GET zones/{zone}/instances/{name}",
		"GET zones/{zone}/machineTypes/{name}",
		"POST zones/{zone}/instances",
		"POST zones/{zone}/operations/{name}/wait",
	}
	if d := cmp.Diff(want, endpoints); d != "" {
		t.Errorf("endpoints hit (-want +got):\n%s", d)
	}
	if hit["POST zones/{zone}/instances"] != 2 || hit["DELETE zones/{zone}/instances/{name}"] != 2 {
		t.Errorf("inserts %d, deletes %d; want 2 and 2", hit["POST zones/{zone}/instances"], hit["DELETE zones/{zone}/instances/{name}"])
	}
	for _, r := range reqs {
		if strings.HasSuffix(r.Path, "/aggregated/instances") && r.Query.Get("filter") != `labels.prebake-dev_cluster = "demo"` {
			t.Errorf("aggregatedList filter %q, want the cluster label", r.Query.Get("filter"))
		}
	}
	t.Logf("requests: %d, by endpoint: %v; x-goog-api-client: %q", len(reqs), hit, reqs[0].APIClient)
}

// route turns /compute/v1/projects/p/zones/z/instances/n into
// zones/{zone}/instances/{name}.
func route(path string) string {
	parts := strings.Split(strings.TrimPrefix(path, "/compute/v1/projects/"), "/")[1:]
	for i := range parts {
		switch {
		case i > 0 && parts[i-1] == "zones":
			parts[i] = "{zone}"
		case i > 0 && (parts[i-1] == "instances" || parts[i-1] == "operations" || parts[i-1] == "machineTypes" || parts[i-1] == "images"):
			parts[i] = "{name}"
		}
	}
	return strings.Join(parts, "/")
}
