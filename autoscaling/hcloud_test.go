package autoscaling

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// newHcloudCore is the core over the real hcloud provider over the fake API.
func newHcloudCore(t *testing.T) (*Core, *hcloudfake.Fake) {
	t.Helper()
	f := hcloudfake.New(hcloudfake.Options{Token: "t"})
	t.Cleanup(f.Close)
	p, err := hcloud.New(hcloud.Options{
		Token: "t", Endpoint: f.URL(), Cluster: "test",
		RetryBase: time.Millisecond, MaxRetries: -1, Rate: 1000, Burst: 1000, PollInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := newCore(t, p, GroupSpec{ID: "cx", Provider: "hcloud", MinSize: 0, MaxSize: 5, MachineType: "cx22", Zone: "fsn1",
		UserData: []byte("#cloud-config\n")})
	return c, f
}

func TestHcloudScalesZeroToThreeToOne(t *testing.T) {
	t.Parallel()
	c, f := newHcloudCore(t)
	if err := c.IncreaseSize("cx", 3); err != nil {
		t.Fatal(err)
	}
	eventually(t, "3 servers", func() bool { return len(f.Servers()) == 3 })
	c.Sync(t.Context(), true)
	var ids []string
	eventually(t, "3 hcloud instances", func() bool {
		ids = ids[:0]
		for _, v := range mustNodes(t, c, "cx") {
			if strings.HasPrefix(v.ProviderID, "hcloud://") && v.State == providers.StateRunning {
				ids = append(ids, v.ProviderID)
			}
		}
		return len(ids) == 3
	})
	if err := c.DeleteNodes("cx", []Node{{ProviderID: ids[0]}, {ProviderID: ids[1]}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "1 server", func() bool { return len(f.Servers()) == 1 })
	c.Sync(t.Context(), true)
	if got := mustTarget(t, c, "cx"); got != 1 {
		t.Fatalf("target = %d, want 1", got)
	}
	// The fake drops a server before the worker's Delete call returns and the
	// worker forgets it: wait for the core's view, not the fake's.
	left := []InstanceView{{ProviderID: ids[2], State: providers.StateRunning}}
	eventually(t, "only "+ids[2]+" left", func() bool { return cmp.Diff(left, mustNodes(t, c, "cx")) == "" })
	s := f.Servers()[0]
	if fmt.Sprint("hcloud://", s.ID) != ids[2] {
		t.Fatalf("the server left is %d, want %s", s.ID, ids[2])
	}
	want := map[string]string{
		providers.LabelCluster: "test", providers.LabelGroup: "cx",
		providers.LabelMachine: s.Name, providers.LabelImageKind: "runtime-install",
	}
	if diff := cmp.Diff(want, s.Labels); diff != "" || !strings.HasPrefix(s.Name, "cx-") {
		t.Fatalf("server %q labels (-want +got):\n%s", s.Name, diff)
	}
	if s.ServerType != "cx22" || s.Location != "fsn1" || s.UserData != "#cloud-config\n" {
		t.Fatalf("server = %+v", s)
	}
}

func TestHcloudResourceUnavailableIsOutOfResources(t *testing.T) {
	t.Parallel()
	c, f := newHcloudCore(t)
	f.Fail(http.MethodPost, "/servers", 1, hcloudfake.ErrResourceUnavailable)
	if err := c.IncreaseSize("cx", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the create to be answered", func() bool {
		return slices.ContainsFunc(mustNodes(t, c, "cx"), func(v InstanceView) bool { return v.Error != nil })
	})
	// One Refresh later the error still stands for CA to fail over on.
	c.Sync(t.Context(), true)
	v := mustNodes(t, c, "cx")
	if len(v) != 1 || v[0].State != providers.StateCreating || v[0].Error == nil ||
		v[0].Error.Class != providers.ErrorOutOfResources || v[0].Error.Code != "resource_unavailable" {
		t.Fatalf("instances = %+v, want one creating with OutOfResources resource_unavailable", v)
	}
	if got := f.Calls(http.MethodPost, "/servers"); got != 1 {
		t.Fatalf("%d create requests; a capacity error must not be retried", got)
	}
	if len(f.Servers()) != 0 {
		t.Fatal("a failed create left a server")
	}
}

// A create_server action that ends in error: the create is reported to CA
// with the provider's stable code and class and stays so across Refreshes,
// so CA backs the group off and deletes the failed machine. The server the
// failed create left behind is never adopted as a machine, and is deleted
// (here the first delete fails; a Refresh's List deletes it again).
func TestHcloudCreateActionFailureIsACreationError(t *testing.T) {
	t.Parallel()
	c, f := newHcloudCore(t)
	f.FailAction("create_server", 1, hcloudfake.ErrActionUnknown)
	f.Fail(http.MethodDelete, "/servers", 1, hcloudfake.ErrServerError)
	if err := c.IncreaseSize("cx", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the create to fail", func() bool {
		return slices.ContainsFunc(mustNodes(t, c, "cx"), func(v InstanceView) bool { return v.Error != nil })
	})
	if len(f.Servers()) != 1 {
		t.Fatalf("servers %+v, want the one left behind", f.Servers())
	}
	for range 2 {
		c.Sync(t.Context(), true)
		v := mustNodes(t, c, "cx")
		if len(v) != 1 || v[0].State != providers.StateCreating || v[0].Error == nil ||
			v[0].Error.Class != providers.ErrorOther || v[0].Error.Code != "create_server_failed" {
			t.Fatalf("instances = %+v, want one creating with Other create_server_failed", v)
		}
	}
	if ss := f.Servers(); len(ss) != 0 {
		t.Fatalf("servers %+v: the one the failed create left behind must be deleted", ss)
	}
	if err := c.DeleteNodes("cx", []Node{{ProviderID: mustNodes(t, c, "cx")[0].ProviderID}}); err != nil {
		t.Fatal(err)
	}
	c.Sync(t.Context(), true)
	if v := mustNodes(t, c, "cx"); len(v) != 0 {
		t.Fatalf("instances after CA deleted the failed one: %+v", v)
	}
}

func TestHcloudTemplateFromServerType(t *testing.T) {
	t.Parallel()
	c, _ := newHcloudCore(t)
	b, err := c.TemplateNode("cx")
	if err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	if err := n.Unmarshal(b); err != nil {
		t.Fatalf("template is not a Node: %v", err)
	}
	cpu, mem := n.Status.Capacity[corev1.ResourceCPU], n.Status.Capacity[corev1.ResourceMemory]
	if cpu.MilliValue() != 2000 || mem.Value() != 4<<30 {
		t.Errorf("template capacity %s CPU / %s memory, want cx22's 2 / 4Gi", cpu.String(), mem.String())
	}
	// The topology labels are what Hetzner's CCM and CSI driver set: the location's
	// datacenter is the zone, the location the region.
	var zone string
	for _, dc := range hcloudfake.DefaultDatacenters() {
		if dc.Location.Name == "fsn1" {
			zone = dc.Name
		}
	}
	for k, want := range map[string]string{
		providers.LabelInstanceType: "cx22", providers.LabelZone: zone, providers.LabelRegion: "fsn1", providers.LabelArch: "amd64",
		providers.LabelGroup: "cx", hcloud.LabelCSILocation: "fsn1", hcloud.LabelProvidedBy: "cloud",
	} {
		if got := n.Labels[k]; got != want || want == "" {
			t.Errorf("template label %s = %q, want %q", k, got, want)
		}
	}
}
