package autoscaling

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// What to do about an unpriced group is what its provider declares
// (Capabilities.PriceFix), whatever the provider is called: a provider
// named "hcloud" that declares a config field gets that field in every
// message CA's price expander and `prebake serve` show, and each message
// names the way out every group has (run CA without price).
func TestPriceErrorsCarryTheProvidersDeclaredFix(t *testing.T) {
	t.Parallel()
	const fix = "set pricePerHour where this provider keeps its machine types"
	p := fake.New()
	p.NameValue, p.PriceFix = "hcloud", fix
	p.Types["free"] = providers.MachineType{Name: "free", MilliCPU: 2000, MemoryBytes: 4 << 30, Pods: 110, Arch: "amd64"}
	c := newCore(t, p, GroupSpec{ID: "nopay", Provider: "hcloud", MaxSize: 3, MachineType: "free", Zone: "fsn1"})
	start := time.Unix(1_800_000_000, 0)
	end := start.Add(time.Hour)

	_, nodeErr := c.NodePrice(Node{Name: "template-node-for-nopay-1", Labels: map[string]string{providers.LabelCluster: "test", providers.LabelGroup: "nopay"}}, start, end)
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}}}
	_, podErr := c.PodPrice(pod, start, end)
	for name, err := range map[string]error{"NodePrice": nodeErr, "PodPrice": podErr, "CheckExpanders": c.CheckExpanders("price,least-waste")} {
		if err == nil {
			t.Errorf("%s of an unpriced group: no error", name)
			continue
		}
		msg := err.Error()
		for _, want := range []string{"nopay", "free", "fsn1", fix, "drop price from cluster-autoscaler's --expander"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q does not say %q", name, msg, want)
			}
		}
		if strings.Contains(msg, "Hetzner") {
			t.Errorf("%s: %q gives Hetzner's fix to a provider that declared another: the core went by the name", name, msg)
		}
	}
	if !errors.Is(nodeErr, ErrNoPrice) || !errors.Is(podErr, ErrNoPrice) {
		t.Errorf("NodePrice %v, PodPrice %v: want both ErrNoPrice (FailedPrecondition)", nodeErr, podErr)
	}
}
