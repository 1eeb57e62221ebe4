package hcloud

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

func newImageProvider(t *testing.T, o hcloudfake.Options) (*Provider, *hcloudfake.Fake) {
	t.Helper()
	f := newFake(t, o)
	p, err := New(Options{Token: testToken, Endpoint: f.URL(), PollInterval: time.Millisecond, Cluster: "c", MaxRetries: -1, SSHKeys: []int64{7}})
	if err != nil {
		t.Fatal(err)
	}
	return p, f
}

// The builder's whole life through the image API: boot (idempotent by
// name), read its labels, snapshot (shutdown first), delete.
func TestBuilderLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, f := newImageProvider(t, hcloudfake.Options{})
	spec := imagecatalog.BuilderSpec{Name: "prebake-builder-amd64-0123", BaseImage: "ubuntu-24.04", MachineType: "cx22",
		Location: "fsn1", UserData: []byte("#cloud-config\nruncmd:\n  - [sh, -c, echo build]\n"), Labels: map[string]string{imagecatalog.LabelBuilder: "0123"}}
	b, err := p.BootBuilder(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.BootBuilder(ctx, spec)
	if err != nil || again.ID != b.ID {
		t.Errorf("second BootBuilder = %+v, %v; want the same builder %s", again, err, b.ID)
	}
	servers := f.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d servers, want 1", len(servers))
	}
	s := servers[0]
	want := hcloudfake.Server{ID: s.ID, Name: spec.Name, Status: "running", ServerType: "cx22", Image: "ubuntu-24.04", Location: "fsn1",
		Labels: spec.Labels, SSHKeys: []int64{7}}
	if d := cmp.Diff(want, s, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(hcloudfake.Server{}, "UserData", "IPv4")); d != "" {
		t.Errorf("builder server (-want +got):\n%s", d)
	}
	// The user-data is the spec's with the builder's SSH access merged in (builderssh_test.go).
	if !strings.Contains(s.UserData, "echo build") || !strings.Contains(s.UserData, "ssh_authorized_keys") {
		t.Errorf("builder user-data lacks the spec's runcmd or prebake's SSH access:\n%s", s.UserData)
	}
	// A builder carries no cluster label: the autoscaler never counts it.
	if ins, err := p.List(ctx); err != nil || len(ins) != 0 {
		t.Errorf("List sees %d instances, %v; want the builder invisible", len(ins), err)
	}
	ci, err := p.Snapshot(ctx, b.ID, "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504", map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if ci.Description != "prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504" || ci.Labels["k"] != "v" {
		t.Errorf("snapshot = %+v", ci)
	}
	if st, err := p.Builder(ctx, b.ID); err != nil || st.Status != "off" {
		t.Errorf("builder after snapshot: %+v, %v; want off (shut down before the snapshot)", st, err)
	}
	if err := p.DeleteBuilder(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteBuilder(ctx, b.ID); err != nil {
		t.Errorf("deleting a builder twice: %v, want nil", err)
	}
	if _, err := p.Builder(ctx, b.ID); !errors.Is(err, imagecatalog.ErrNotFound) {
		t.Errorf("Builder of a deleted server: %v, want ErrNotFound", err)
	}
}

func TestImageAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := hcloudfake.NewClock(time.Date(2026, 11, 30, 15, 4, 0, 0, time.UTC))
	p, _ := newImageProvider(t, hcloudfake.Options{Now: clk.Now})
	b, err := p.BootBuilder(ctx, imagecatalog.BuilderSpec{Name: "b", BaseImage: "ubuntu-24.04", MachineType: "cx22", UserData: []byte("#cloud-config\n")})
	if err != nil {
		t.Fatal(err)
	}
	ci, err := p.Snapshot(ctx, b.ID, "d", map[string]string{imagecatalog.LabelOS: "ubuntu-2404", "team": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.GetImage(ctx, ci.ID); err != nil || !got.Created.Equal(clk.Now()) {
		t.Errorf("GetImage = %+v, %v", got, err)
	}
	// Only snapshots are listed, filtered by every label of the selector.
	for sel, n := range map[string]int{"": 1, imagecatalog.LabelOS + "=ubuntu-2404": 1, imagecatalog.LabelOS + "=debian-12": 0} {
		m := map[string]string{}
		if k, v, ok := strings.Cut(sel, "="); ok {
			m[k] = v
		}
		if ims, err := p.ListImages(ctx, m); err != nil || len(ims) != n {
			t.Errorf("ListImages(%q) = %d images, %v; want %d", sel, len(ims), err, n)
		}
	}
	if err := p.SetLabels(ctx, ci.ID, map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	if err := p.SetDeleteProtection(ctx, ci.ID, true); err != nil {
		t.Fatal(err)
	}
	got, _ := p.GetImage(ctx, ci.ID)
	if d := cmp.Diff(map[string]string{"a": "b"}, got.Labels); d != "" || !got.Protected {
		t.Errorf("after SetLabels and protection: labels diff %s, protected %v", d, got.Protected)
	}
	if err := p.DeleteImage(ctx, ci.ID); !hcloud.IsError(err, hcloud.ErrorCodeProtected) {
		t.Errorf("deleting a protected image: %v, want protected", err)
	}
	if err := p.SetDeleteProtection(ctx, ci.ID, false); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteImage(ctx, ci.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteImage(ctx, ci.ID); err != nil {
		t.Errorf("deleting a gone image: %v, want nil", err)
	}
	if _, err := p.GetImage(ctx, ci.ID); !errors.Is(err, imagecatalog.ErrNotFound) {
		t.Errorf("GetImage of a deleted image: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "ubuntu-24.04", "-1"} {
		if err := p.DeleteImage(ctx, bad); err == nil || !strings.Contains(err.Error(), "numeric id") {
			t.Errorf("DeleteImage(%q) = %v, want an error asking for the numeric id", bad, err)
		}
	}
}

// gc's instance list: the cluster's servers and the image each booted from.
func TestListInstancesReportsBootImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, f := newImageProvider(t, hcloudfake.Options{})
	b, err := p.BootBuilder(ctx, imagecatalog.BuilderSpec{Name: "b", BaseImage: "ubuntu-24.04", MachineType: "cx22", UserData: []byte("#cloud-config\n")})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := p.Snapshot(ctx, b.ID, "d", nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(Options{Token: testToken, Endpoint: f.URL(), PollInterval: time.Millisecond, Cluster: "c", Image: snap.ID, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	in, err := other.Create(ctx, providers.CreateRequest{Name: "n1", Cluster: "c", Group: "g", MachineType: "cx22", Location: "fsn1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimPrefix(in.ProviderID, "hcloud://")
	if d := cmp.Diff([]imagecatalog.Instance{{ID: id, Image: snap.ID}}, got); d != "" {
		t.Errorf("ListInstances (-want +got):\n%s", d)
	}
	if _, err := strconv.ParseInt(snap.ID, 10, 64); err != nil {
		t.Errorf("snapshot id %q is not numeric", snap.ID)
	}
}
