package imagecatalog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDocumentRoundTrip(t *testing.T) {
	t.Parallel()
	c := scenario(t)
	data := must[[]byte](t)(Marshal(c, 7))
	for _, want := range []string{
		"apiVersion: prebake.dev/v1alpha1\nkind: ImageCatalog\ngeneration: 7\n",
		"name: prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504",
		"reason: C fails canary join",
		"kubelet: 1.34.2-1.1",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("document lacks %q:\n%s", want, data)
		}
	}
	back, gen, err := Unmarshal("catalog.yaml", data)
	if err != nil || gen != 7 {
		t.Fatalf("Unmarshal: generation %d, %v", gen, err)
	}
	if d := cmp.Diff(c, back); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	again := must[[]byte](t)(Marshal(back, 7))
	if string(again) != string(data) {
		t.Errorf("marshalling is not stable:\n%s\n---\n%s", data, again)
	}
}

func TestUnmarshalStrict(t *testing.T) {
	t.Parallel()
	good := string(must[[]byte](t)(Marshal(scenario(t), 1)))
	tests := map[string]struct{ doc, want string }{
		"empty":           {"", "empty document"},
		"wrong version":   {strings.Replace(good, "v1alpha1", "v1", 1), `apiVersion "prebake.dev/v1"`},
		"wrong kind":      {strings.Replace(good, "kind: ImageCatalog", "kind: Catalog", 1), `kind "Catalog"`},
		"unknown field":   {strings.Replace(good, "generation: 1", "generation: 1\nowner: me", 1), "field owner not found"},
		"typo in channel": {strings.Replace(good, "rolledBack:", "rolledback:", 1), "field rolledback not found"},
		"two documents":   {good + "---\n" + good, "more than one YAML document"},
		"dangling channel": {strings.Replace(good, "image: D", "image: Q", 1),
			`points to image "Q", which the catalog lacks`},
		"bad name": {strings.Replace(good, "name: prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504", "name: ubuntu-latest", 1), `"ubuntu-latest"`},
	}
	for what, tt := range tests {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			_, _, err := Unmarshal("catalog.yaml", []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "catalog.yaml") {
				t.Errorf("Unmarshal = %v, want an error from catalog.yaml containing %q", err, tt.want)
			}
		})
	}
}

func TestFileStoreCompareAndSwap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := FileStore{Path: filepath.Join(t.TempDir(), "catalog.yaml")}
	c, rev, err := s.Load(context.Background())
	if err != nil || rev != (Revision{}) || len(c.Images) != 0 {
		t.Fatalf("Load of a missing file = %v, %v, %v; want an empty catalog", c, rev, err)
	}
	rev = must[Revision](t)(s.Save(ctx, must[Catalog](t)(Publish(c, testImage("A", 0))), rev))
	if rev.Generation != 1 {
		t.Errorf("first save: generation %d, want 1", rev.Generation)
	}

	// Two writers load the same revision; the second to save must not
	// overwrite the first one's change.
	c1, rev1, _ := s.Load(context.Background())
	c2, rev2, _ := s.Load(context.Background())
	c1 = promote(t, c1, ChannelStable, "A")
	c2 = must[Catalog](t)(Publish(c2, testImage("B", 1)))
	if _, err := s.Save(ctx, c1, rev1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, c2, rev2); !errors.Is(err, ErrConflict) {
		t.Fatalf("second writer's save: %v, want ErrConflict", err)
	}
	got, rev, _ := s.Load(context.Background())
	if _, ok := got.Channel(ChannelStable, testKey); !ok || len(got.Images) != 1 || rev.Generation != 2 {
		t.Errorf("after the conflict the file has %d images, stable %v, generation %d; want the first writer's", len(got.Images), ok, rev.Generation)
	}

	// A hand edit is a change too.
	data, _ := os.ReadFile(s.Path)
	if err := os.WriteFile(s.Path, append(data, "# reviewed\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, got, rev); !errors.Is(err, ErrConflict) {
		t.Errorf("save over a hand edit: %v, want ErrConflict", err)
	}

	// Creating over a file that appeared meanwhile conflicts as well.
	fresh := FileStore{Path: filepath.Join(t.TempDir(), "catalog.yaml")}
	if err := os.WriteFile(fresh.Path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Save(ctx, Catalog{}, Revision{}); !errors.Is(err, ErrConflict) {
		t.Errorf("create over an existing file: %v, want ErrConflict", err)
	}
}

func TestFileStoreUpdateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := FileStore{Path: filepath.Join(t.TempDir(), "catalog.yaml")}
	const writers = 6
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Update(ctx, func(c Catalog) (Catalog, error) {
				return Publish(c, testImage(fmt.Sprintf("I%d", i), i))
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	c, rev, err := s.Load(context.Background())
	if err != nil || len(c.Images) != writers || rev.Generation != writers {
		t.Errorf("after %d concurrent updates: %d images, generation %d, %v", writers, len(c.Images), rev.Generation, err)
	}
}

func TestFileStoreStaleLock(t *testing.T) {
	t.Parallel()
	s := FileStore{Path: filepath.Join(t.TempDir(), "catalog.yaml")}
	if err := os.WriteFile(s.Path+".lock", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := s.Save(ctx, Catalog{}, Revision{})
	if err == nil || !strings.Contains(err.Error(), s.Path+".lock") {
		t.Errorf("save under a held lock = %v, want an error naming the lock file", err)
	}
}
