//go:build e2e

package realnode

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/internal/kubetest/registry"
)

// largeSizeEnv sets the large image's data size in MiB (default 500).
const largeSizeEnv = "PREBAKE_REALNODE_LARGE_MIB"

func largeOptions(t *testing.T) registry.LargeOptions {
	mib := int64(500)
	if v := os.Getenv(largeSizeEnv); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number of MiB, such as 500", largeSizeEnv, v)
		}
		mib = n
	}
	return registry.LargeOptions{Size: mib << 20, Layers: 4}
}

// TestLargeImageBakedAgainstPulled measures what baking a pod's image into the machine image
// saves, for a small image (the workload: busybox) and a large one (the workload plus
// $PREBAKE_REALNODE_LARGE_MIB MiB of incompressible data, 500 by default, in 4 layers),
// side by side in one run: four groups of one node each, two booting the base image (runtime
// install; the node pulls the pod's image from the local registry) and two booting a catalog
// image `prebake images build` made with both pod images baked. One Pending pod per group,
// created at the same moment. The baked pods must find their image present (kubelet's
// "already present on machine"), the pulled ones must pull it.
func TestLargeImageBakedAgainstPulled(t *testing.T) {
	w := needWorld(t)
	lo := largeOptions(t)
	large, err := w.LargeImage(t.Context(), lo)
	if err != nil {
		t.Fatal(err)
	}
	img, err := w.BuildPrebaked(t.Context(), BuildSpec{Repository: w.Name + "-large", ExtraImages: []string{large}})
	if err != nil {
		t.Fatalf("build the prebaked image with %s baked: %v", large, err)
	}
	t.Logf("prebaked image %s (with %s) built by `prebake images build` in %s", img.Ref, large, img.Took.Round(time.Second))

	type run struct{ group, kind, image, pod string }
	runs := []run{
		{"pulled-small", "runtime-install", w.WorkloadImage, ""},
		{"pulled-large", "runtime-install", large, ""},
		{"baked-small", "prebaked", w.WorkloadImage, ""},
		{"baked-large", "prebaked", large, ""},
	}
	var groups []Group
	for _, r := range runs {
		groups = append(groups, Group{ID: r.group, MaxSize: 1, Prebaked: r.kind == "prebaked"})
	}
	s := newScenario(t, w, "lg", 40*time.Minute, ConfigOptions{Catalog: img.Catalog, ImageRepository: w.Name + "-large", Groups: groups})
	for i := range runs {
		runs[i].pod = s.createPodOf(runs[i].group, runs[i].group, runs[i].image, nil)
	}
	errs := make(chan error, len(runs))
	for _, r := range runs {
		go func() { errs <- s.waitPodRunning(r.pod, r.group, 30*time.Minute) }()
	}
	for range runs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	var measured [][]Measured
	var cols, sched, pulls []string
	for _, r := range runs {
		in := s.waitInstance(r.pod, func(in standin.Instance) bool { return !in.PodRunning.IsZero() && !in.Ready.IsZero() })
		if in.Group != r.group || in.ImageKind != r.kind {
			t.Errorf("instance %s: group %s kind %s, want %s %s", in.ID, in.Group, in.ImageKind, r.group, r.kind)
		}
		node := s.nodeByProviderID(in.ID)
		ct, err := s.containerOf(in.ID)
		if err != nil {
			t.Fatal(err)
		}
		boot, err := ReadBoot(s.ctx, w.Engine, ct.ID)
		if err != nil {
			t.Fatal(err)
		}
		_, name, _ := strings.Cut(r.pod, "/")
		pulled := strings.Join(s.podEvents(name, "Pulled"), "\n")
		pull := time.Duration(-1)
		switch r.kind {
		case "prebaked":
			if ph, ok := boot.Status.Phase("images"); !ok || ph.Result != "ok" || len(boot.Status.MissingImages) > 0 {
				t.Errorf("%s node %s: images phase %+v (present %v), missing %v; want every baked image present", r.group, node.Name, ph, ok, boot.Status.MissingImages)
			}
			if !strings.Contains(pulled, "already present on machine") {
				t.Errorf("%s pod's Pulled events %q: want the image already present (baked)", r.group, pulled)
			}
			pulls = append(pulls, fmt.Sprintf("%s: already present", r.group))
		default:
			d, size, ok := kubeletPull(pulled)
			if !ok {
				t.Errorf("%s pod's Pulled events %q: want kubelet's \"Successfully pulled … in …\"", r.group, pulled)
			}
			if r.image == large && size < lo.Size {
				t.Errorf("%s: kubelet pulled an image of %d bytes, want at least the large image's %d", r.group, size, lo.Size)
			}
			pull = d
			pulls = append(pulls, fmt.Sprintf("%s: %s, image size %d MiB", r.group, d.Round(time.Millisecond), size>>20))
		}
		m := Measure(in, boot)
		for _, x := range m {
			if x.Unmeasured() {
				t.Errorf("%s node %s: phase %q (%s → %s) was not measured", r.group, node.Name, x.Phase, x.From, x.To)
			}
		}
		m = append(m, Measured{Phase: "image pull", From: "kubelet pulling", To: "pulled", Source: "kubelet's Pulled event (its own clock; – where the image was present)", D: pull})
		measured = append(measured, m)
		cols = append(cols, fmt.Sprintf("%s (%s)", r.group, r.kind))
		sched = append(sched, s.scheduledNote(r.pod, node.Name, in))
	}

	c := Compare(fmt.Sprintf("Baked against pulled pod images, small and large, on real nodes (docker provider, %s), one run, measured:", w.HostDescription(s.ctx)), cols, measured...)
	c.Notes = append(c.Notes,
		fmt.Sprintf("small: %s (busybox); large: %s (busybox and %d MiB of incompressible data in %d layers), pulled from a local registry on the Docker network's gateway.", w.WorkloadImage, large, lo.Size>>20, lo.Layers),
		fmt.Sprintf("Both baked groups boot %s (pause, small and large baked; built in %s); on the docker provider a new node's containerd volume is filled from the image when the container is made, which is in \"to container start\".", img.ID, img.Took.Round(time.Second)),
		"kubelet's pulls: "+strings.Join(pulls, "; ")+".",
		"Where Node Ready → pod Running went (PodScheduled and the container's start, API times in whole seconds): "+strings.Join(sched, "; ")+".")
	t.Logf("\n%s", c.Markdown())
	addReport(c)
}
