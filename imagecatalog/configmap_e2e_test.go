//go:build e2e

package imagecatalog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/internal/kubetest"
)

// TestConfigMapStoreTwoWritersAgainstKubeAPIServer proves the ConfigMap
// store's compare-and-swap on a real kube-apiserver (the hermetic control
// plane): a stale save is refused, and writers racing through Update never
// lose each other's images. Run it with:
//
//	go test -tags e2e -run ConfigMap -v ./imagecatalog/ -timeout 40m
func TestConfigMapStoreTwoWritersAgainstKubeAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	_, cs := kubetest.StartTest(ctx, t)
	store := imagecatalog.ConfigMapStore{Client: cs.CoreV1(), Namespace: "default", Name: "prebake-images"}

	// A stale revision is refused by the API server.
	if _, err := store.Save(ctx, imagecatalog.Catalog{}, imagecatalog.Revision{}); err != nil {
		t.Fatal(err)
	}
	c1, rev1, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, rev2, _ := store.Load(ctx)
	if _, err := store.Save(ctx, withImage(t, c1, 0), rev1); err != nil {
		t.Fatalf("first writer: %v", err)
	}
	if _, err := store.Save(ctx, withImage(t, c1, 1), rev2); !errors.Is(err, imagecatalog.ErrConflict) {
		t.Fatalf("second writer with the same revision: %v, want ErrConflict", err)
	}

	// Writers racing through Update: every image each one adds survives.
	const writers, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				n := 100 + w*each + i
				if _, err := imagecatalog.Update(ctx, store, func(c imagecatalog.Catalog) (imagecatalog.Catalog, error) {
					return imagecatalog.Publish(c, image(t, n))
				}); err != nil {
					errs <- fmt.Errorf("writer %d image %d: %w", w, n, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, rev, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, im := range got.Images {
		ids = append(ids, im.ID)
	}
	slices.Sort(ids)
	want := []string{"img-0"}
	for n := 100; n < 100+writers*each; n++ {
		want = append(want, fmt.Sprintf("img-%d", n))
	}
	slices.Sort(want)
	if d := cmp.Diff(want, ids); d != "" {
		t.Errorf("images after racing writers (-want +got):\n%s", d)
	}
	if rev.Generation != int64(2+writers*each) {
		t.Errorf("generation %d, want %d (one per save)", rev.Generation, 2+writers*each)
	}
}

func image(t *testing.T, n int) imagecatalog.Image {
	t.Helper()
	built := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Minute)
	return imagecatalog.Image{
		ID: fmt.Sprintf("img-%d", n), Provider: "hcloud", Created: built, InputsHash: fmt.Sprintf("%032x", n),
		Name:     imagecatalog.Name{OS: "ubuntu", OSVersion: "2404", K8s: imagecatalog.Version{Major: 1, Minor: 34, Patch: 2}, Arch: "amd64", Built: built}.String(),
		Manifest: imagecatalog.DefaultManifest(exactVersions()),
	}
}

func withImage(t *testing.T, c imagecatalog.Catalog, n int) imagecatalog.Catalog {
	t.Helper()
	out, err := imagecatalog.Publish(c, image(t, n))
	if err != nil {
		t.Fatal(err)
	}
	return out
}
