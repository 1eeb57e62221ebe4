package registry

import (
	"context"
	"fmt"
	"os"
)

// Set is the images pods use on real nodes.
type Set struct {
	Pause    Image // the pod sandbox image (containerd's sandbox_image)
	Workload Image // small: busybox, serves HTTP on WorkloadPort
	Large    Image // the workload image plus LargeOptions.Size bytes of data; zero when not asked for
}

// All returns the set's images, Large only when it was built.
func (s Set) All() []Image {
	out := []Image{s.Pause, s.Workload}
	if s.Large.Image != nil {
		out = append(out, s.Large)
	}
	return out
}

// BuildImages builds the pause binary, fetches busybox-static (both cached under
// opts.CacheDir) and assembles the images; Large only when large.Size > 0.
func BuildImages(ctx context.Context, opts BuildOptions, large LargeOptions) (Set, error) {
	pauseBin, err := BuildPause(ctx, opts)
	if err != nil {
		return Set{}, err
	}
	data, err := os.ReadFile(pauseBin)
	if err != nil {
		return Set{}, fmt.Errorf("read the pause binary: %w", err)
	}
	var s Set
	if s.Pause, err = PauseImage(data); err != nil {
		return Set{}, err
	}
	bb, err := FetchBusybox(ctx, opts)
	if err != nil {
		return Set{}, err
	}
	if s.Workload, err = WorkloadImage(bb); err != nil {
		return Set{}, err
	}
	if large.Size > 0 {
		if s.Large, err = LargeImage(bb, large); err != nil {
			return Set{}, err
		}
	}
	return s, nil
}

// PushAll pushes imgs to the registry at host and returns their references in order.
func PushAll(ctx context.Context, host string, imgs ...Image) ([]Pushed, error) {
	out := make([]Pushed, 0, len(imgs))
	for _, img := range imgs {
		p, err := Push(ctx, host, img)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
