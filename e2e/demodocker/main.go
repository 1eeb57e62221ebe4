// Command demodocker is `make demo-docker`: autoscaling with real nodes on this host, a
// prebaked one and a vanilla one side by side, the phase table printed at the end.
//
// It starts the real-node world (e2e/realnode: the hermetic control plane joinable by
// kubeadm on a Docker network's gateway, a file server with the node binaries — the
// stand-in for the upstream download — and a local registry with the pod images), makes the
// prebaked image with `prebake images build` (the first run; later runs load it from the
// cache, ~/.cache/prebake/demo-docker), runs `prebake serve` with the docker provider and two
// groups, and drives it with the CA stand-in: one Pending pod per group. When both pods run
// it prints the measured phases, scales both groups down with DeleteNodes, and removes
// everything it made in the engine (containers, volumes, networks, images), also on Ctrl-C.
// The stand-in is not cluster-autoscaler (e2e/standin says how it differs).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/image"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/deploy"
	"github.com/prebake-dev/prebake/e2e/realnode"
	"github.com/prebake-dev/prebake/e2e/serveproc"
	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/providers"
)

// repository holds the demo's prebaked image while it runs; between runs it is a tarball
// in the cache.
const repository = "prebake-demo-node"

type clock struct {
	mu    sync.Mutex
	began time.Time
	out   io.Writer
}

func (c *clock) printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.out, "[%7.1fs] %s\n", time.Since(c.began).Seconds(), fmt.Sprintf(format, args...))
}

// Write makes the clock an io.Writer for the world's progress lines.
func (c *clock) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		c.printf("  %s", line)
	}
	return len(b), nil
}

func main() {
	timeout := flag.Duration("timeout", 60*time.Minute, "give up after this long (the first run builds the control plane, node binaries and images)")
	flag.Parse()
	c := &clock{began: time.Now(), out: os.Stdout}
	c.printf("make demo-docker: real nodes in Docker containers, prebaked vs vanilla (Ctrl-C stops and removes everything)")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	err := run(ctx, c)
	switch {
	case err == nil:
		c.printf("done: everything the demo made is removed")
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		c.printf("interrupted: everything the demo made is removed")
		os.Exit(130)
	default:
		fmt.Fprintln(os.Stderr, "demo-docker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c *clock) (err error) {
	dir, err := os.MkdirTemp("", "prebake-demo-docker-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c.printf("starting the world: base image, control plane, node binaries, registry (cached after the first run)")
	w, err := realnode.Start(ctx, realnode.Options{Out: c, Dir: dir})
	if errors.Is(err, realnode.ErrPrerequisite) {
		return fmt.Errorf("%w\n(make demo-docker needs root, a Docker engine, debootstrap and the go command)", err)
	}
	if err != nil {
		return err
	}
	defer func() {
		if cerr := w.Close(); cerr != nil {
			c.printf("cleanup: %v", cerr)
		}
	}()
	img, err := prebaked(ctx, c, w)
	if err != nil {
		return err
	}
	defer func() {
		_, rerr := w.Engine.ImageRemove(context.Background(), img.Ref, image.RemoveOptions{Force: true, PruneChildren: true})
		if rerr != nil {
			c.printf("cleanup: remove %s: %v", img.Ref, rerr)
		}
		_, _ = w.Engine.ImageRemove(context.Background(), repository+"-labels:"+img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	}()
	return scaleUp(ctx, c, w, img, dir)
}

// cacheState is what the cache says about the saved image.
type cacheState struct {
	ImageID  string            `json:"imageID"`
	Versions map[string]string `json:"versions"`
	Pause    string            `json:"pauseImage"`
	Workload string            `json:"workloadImage"`
	Built    string            `json:"built"`
	Took     string            `json:"took"`
}

// prebaked loads the image the cache holds when it was built from the components and pod
// images the nodes run now; otherwise it builds it with `prebake images build` and saves it.
func prebaked(ctx context.Context, c *clock, w *realnode.World) (realnode.Prebaked, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return realnode.Prebaked{}, err
	}
	cache := filepath.Join(base, "prebake", "demo-docker")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return realnode.Prebaked{}, err
	}
	statePath, tarPath, catPath := filepath.Join(cache, "state.json"), filepath.Join(cache, "image.tar"), filepath.Join(cache, "catalog.yaml")
	var st cacheState
	if data, err := os.ReadFile(statePath); err == nil && json.Unmarshal(data, &st) == nil &&
		maps.Equal(st.Versions, w.Versions()) && st.Pause == w.PauseImage && st.Workload == w.WorkloadImage {
		if f, err := os.Open(tarPath); err == nil {
			c.printf("loading the prebaked image %s from %s (built %s in %s by an earlier run; remove %s to build again)", st.ImageID, tarPath, st.Built, st.Took, cache)
			resp, lerr := w.Engine.ImageLoad(ctx, f)
			if lerr == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			f.Close()
			if lerr == nil {
				return realnode.Prebaked{ID: st.ImageID, Ref: repository + ":" + st.ImageID, Catalog: catPath}, nil
			}
			c.printf("loading failed (%v): building it again", lerr)
		}
	}
	c.printf("building the prebaked image with `prebake images build` (first run: a few minutes)")
	img, err := w.BuildPrebaked(ctx, realnode.BuildSpec{Repository: repository})
	if err != nil {
		return realnode.Prebaked{}, err
	}
	c.printf("built %s in %s; saving it to %s for the next runs", img.Ref, img.Took.Round(time.Second), tarPath)
	if err := save(ctx, w, img.Ref, tarPath); err != nil {
		c.printf("could not save the image (the next run builds it again): %v", err)
		return img, nil
	}
	cat, err := os.ReadFile(img.Catalog)
	if err == nil {
		err = os.WriteFile(catPath, cat, 0o644)
	}
	if err == nil {
		st = cacheState{ImageID: img.ID, Versions: w.Versions(), Pause: w.PauseImage, Workload: w.WorkloadImage,
			Built: time.Now().UTC().Format(time.RFC3339), Took: img.Took.Round(time.Second).String()}
		data, _ := json.MarshalIndent(st, "", "  ")
		err = os.WriteFile(statePath, data, 0o644)
	}
	if err != nil {
		c.printf("could not write the cache state (the next run builds again): %v", err)
	}
	img.Catalog = catPath
	return img, nil
}

func save(ctx context.Context, w *realnode.World, ref, path string) error {
	rc, err := w.Engine.ImageSave(ctx, []string{ref})
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// scaleUp runs prebake serve with a vanilla and a prebaked group, one Pending pod each,
// prints the measured phases and scales both down.
func scaleUp(ctx context.Context, c *clock, w *realnode.World, img realnode.Prebaked, dir string) error {
	cluster := w.Name + "-demo"
	cfg := filepath.Join(dir, "prebake.yaml")
	if err := w.WriteConfig(cfg, realnode.ConfigOptions{Cluster: cluster, Catalog: img.Catalog, ImageRepository: repository,
		Groups: []realnode.Group{{ID: "vanilla", MaxSize: 1}, {ID: "prebaked", MaxSize: 1, Prebaked: true}}}); err != nil {
		return err
	}
	kube := w.Kube
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cluster}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() {
		bg, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = kube.CoreV1().Namespaces().Delete(bg, cluster, metav1.DeleteOptions{})
		_ = kube.CoreV1().Nodes().DeleteCollection(bg, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: providers.LabelCluster + "=" + cluster})
	}()
	expander, err := deploy.CAExpander()
	if err != nil {
		return err
	}
	c.printf("prebake serve --config %s (docker provider, groups vanilla and prebaked)", cfg)
	p, err := serveproc.Start(ctx, serveproc.Options{Binary: w.Prebake, Config: cfg, Dir: dir, Args: []string{"--ca-expander=" + expander}})
	if err != nil {
		return err
	}
	defer p.Close()
	conn, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	si, err := standin.New(standin.Options{Conn: conn, Kube: kube, Namespace: cluster, Expander: expander,
		Logger: slog.New(slog.DiscardHandler),
		OnEvent: func(ev standin.Event) {
			switch ev.Kind {
			case standin.EventScaleUp, standin.EventListed, standin.EventNodeRegistered, standin.EventNodeReady, standin.EventPodRunning, standin.EventDeleteNodes, standin.EventNodeDeleted:
				c.printf("stand-in: %s", ev.String())
			}
		}})
	if err != nil {
		return err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	if err := si.Start(runCtx); err != nil {
		return err
	}
	go func() { _ = si.Run(runCtx) }()
	if err := waitFor(ctx, 2*time.Minute, func() bool {
		_, err := kube.CoreV1().ServiceAccounts(cluster).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return fmt.Errorf("namespace %s has no default service account: %w", cluster, err)
	}
	for _, g := range []string{"vanilla", "prebaked"} {
		if err := createPod(ctx, w, cluster, "on-"+g, g); err != nil {
			return err
		}
	}
	c.printf("two Pending pods, one per group: the stand-in scales each group up by one")
	if err := waitFor(ctx, 30*time.Minute, func() bool {
		n := 0
		for _, in := range si.Instances() {
			if !in.PodRunning.IsZero() && !in.Ready.IsZero() {
				n++
			}
		}
		return n == 2
	}); err != nil {
		return fmt.Errorf("the pods did not both run: %w", err)
	}
	var runs [][]realnode.Measured
	var cols []string
	var nodes []*corev1.Node
	for _, g := range []string{"vanilla", "prebaked"} {
		var in standin.Instance
		for _, x := range si.Instances() {
			if x.Group == g && !x.PodRunning.IsZero() && !x.Ready.IsZero() {
				in = x
			}
		}
		ct, err := w.Engine.ContainerInspect(ctx, strings.TrimPrefix(in.ID, "docker://"))
		if err != nil {
			return err
		}
		boot, err := realnode.ReadBoot(ctx, w.Engine, ct.ID)
		if err != nil {
			return err
		}
		node, err := kube.CoreV1().Nodes().Get(ctx, in.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		nodes = append(nodes, node)
		runs = append(runs, realnode.Measure(in, boot))
		inst, _ := boot.Status.Phase("install")
		cols = append(cols, fmt.Sprintf("%s (%s)", in.ImageKind, node.Name))
		c.printf("%s node %s: prebaked=%v, install %s (%s)", g, node.Name, boot.Status.Prebaked, inst.Result, inst.Detail)
	}
	table := realnode.Compare(fmt.Sprintf("Pending pod → pod Running on real nodes (%s), measured:", w.HostDescription(ctx)), cols, runs...)
	table.Notes = append(table.Notes, "Binaries come from a file server on the Docker network's gateway (the stand-in for the upstream download, sha256-checked); Debian packages from Debian's mirror; pod images from a local registry. The stand-in is not cluster-autoscaler.")

	c.printf("scaling down: DeleteNodes for both nodes")
	_ = kube.CoreV1().Pods(cluster).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	for _, n := range nodes {
		if err := si.DeleteNodes(ctx, n.Labels[providers.LabelGroup], n); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, 5*time.Minute, func() bool {
		for _, n := range nodes {
			if _, err := kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		left, err := realnode.Leftovers(ctx, w.Engine, cluster)
		return err == nil && !slices.ContainsFunc(left, func(s string) bool { return strings.HasPrefix(s, "container") || strings.HasPrefix(s, "volume") })
	}); err != nil {
		return fmt.Errorf("scale-down did not remove the machines: %w", err)
	}
	c.printf("both machines and Nodes are gone")
	fmt.Fprintf(c.out, "\n%s\n", table.Markdown())
	return nil
}

func createPod(ctx context.Context, w *realnode.World, ns, name, group string) error {
	zero := int64(0)
	no := false
	_, err := w.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{providers.LabelGroup: group, providers.LabelCluster: ns},
			TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "app", Image: w.WorkloadImage, Command: []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
		},
	}, metav1.CreateOptions{})
	return err
}

func waitFor(ctx context.Context, bound time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}
