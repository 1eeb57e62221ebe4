package imagecatalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// Revision identifies one stored version of the catalog. Hash is "" when
// nothing is stored yet; otherwise it is the store's token for the stored
// bytes: the content hash for a file, the resourceVersion for a ConfigMap.
type Revision struct {
	Generation int64
	Hash       string
}

// Store keeps the catalog document with compare-and-swap: Save writes only
// if the stored document is still at the revision the caller loaded, and
// otherwise fails with an error wrapping ErrConflict. FileStore and
// ConfigMapStore implement it.
type Store interface {
	// Load reads the catalog; nothing stored is an empty catalog at the
	// zero revision.
	Load(ctx context.Context) (Catalog, Revision, error)
	Save(ctx context.Context, c Catalog, rev Revision) (Revision, error)
	// String names the store in messages: a path, or configmap://ns/name.
	String() string
}

// FileStore keeps the catalog document in one file, with compare-and-swap:
// Save writes only if the file is still the revision the caller loaded, so
// two writers never lose each other's updates.
//
// The check and the write happen under a lock file (Path + ".lock", created
// exclusively), which works across processes on a local file system. A writer
// killed while holding it leaves the file behind; the error names it.
type FileStore struct {
	Path string
}

// Load reads the catalog. A missing file is an empty catalog at the zero
// revision, so the first Save creates it.
func (s FileStore) Load(context.Context) (Catalog, Revision, error) {
	data, err := os.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return Catalog{}, Revision{}, nil
	}
	if err != nil {
		return Catalog{}, Revision{}, err
	}
	c, gen, err := Unmarshal(s.Path, data)
	if err != nil {
		return Catalog{}, Revision{}, err
	}
	return c, Revision{Generation: gen, Hash: hashOf(data)}, nil
}

// Save writes c if the stored document is still at rev, and returns the new
// revision. Otherwise it returns an error wrapping ErrConflict: load again,
// reapply the change and retry (Update does that).
func (s FileStore) Save(ctx context.Context, c Catalog, rev Revision) (Revision, error) {
	if err := c.Validate(); err != nil {
		return rev, fmt.Errorf("save %s: %w", s.Path, err)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return rev, err
	}
	defer unlock()
	cur, err := os.ReadFile(s.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if rev.Hash != "" {
			return rev, fmt.Errorf("save %s: %w: the file was removed since it was loaded", s.Path, ErrConflict)
		}
	case err != nil:
		return rev, err
	case hashOf(cur) != rev.Hash:
		return rev, fmt.Errorf("save %s: %w: another writer changed it since it was loaded (generation %d); load it again and retry",
			s.Path, ErrConflict, rev.Generation)
	}
	data, err := Marshal(c, rev.Generation+1)
	if err != nil {
		return rev, err
	}
	if err := writeAtomic(s.Path, data); err != nil {
		return rev, fmt.Errorf("save %s: %w", s.Path, err)
	}
	return Revision{Generation: rev.Generation + 1, Hash: hashOf(data)}, nil
}

// maxUpdateAttempts bounds Update's retries on conflict.
const maxUpdateAttempts = 16

func (s FileStore) String() string { return s.Path }

// Update is the package function Update on s.
func (s FileStore) Update(ctx context.Context, fn func(Catalog) (Catalog, error)) (Catalog, error) {
	return Update(ctx, s, fn)
}

// Update loads the catalog, applies fn and saves, retrying on conflict with
// the other writer's result. fn must be a pure function of its argument; it
// may run more than once.
func Update(ctx context.Context, s Store, fn func(Catalog) (Catalog, error)) (Catalog, error) {
	for attempt := 1; ; attempt++ {
		c, rev, err := s.Load(ctx)
		if err != nil {
			return Catalog{}, err
		}
		next, err := fn(c)
		if err != nil {
			return Catalog{}, err
		}
		_, err = s.Save(ctx, next, rev)
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, ErrConflict) || attempt == maxUpdateAttempts {
			return Catalog{}, err
		}
		// Writers that collided would collide again if they retried in
		// step; a random pause, growing with the attempts, breaks that.
		select {
		case <-ctx.Done():
			return Catalog{}, fmt.Errorf("%w (after %d conflicts)", ctx.Err(), attempt)
		case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(10*time.Millisecond)))):
		}
	}
}

func (s FileStore) lock(ctx context.Context) (unlock func(), err error) {
	name := s.Path + ".lock"
	for {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
			return func() { os.Remove(name) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", s.Path, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock %s: %w: another writer holds %s; if none is running, remove it", s.Path, ctx.Err(), name)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
