package realnode

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/prebake-dev/prebake/providers"
)

// Everything a world makes in the engine is named or labelled after it: its name is
// "prn<pid>-<hex>" (the pid of the process that made it), every cluster of it is
// "<name>-<suffix>" (the prebake.dev/cluster label of what the docker provider makes, and the
// start of its container, volume and image names), and its own network carries
// LabelCluster=<name>. A world whose process is gone (a test binary killed by a signal runs
// no cleanup) is removed by the next world that starts.
const LabelCluster = providers.LabelCluster

var worldName = regexp.MustCompile(`^prn([0-9]+)-[0-9a-f]+`)

// ownerAlive reports whether the world that s belongs to has a live process; s that belongs
// to no world is reported alive (left alone).
func ownerAlive(s string) (string, bool) {
	m := worldName.FindStringSubmatch(s)
	if m == nil {
		return "", true
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil || pid <= 0 {
		return m[0], false
	}
	return m[0], !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// reapDead removes everything of worlds whose process is gone.
func reapDead(ctx context.Context, c *client.Client) error {
	dead := map[string]bool{}
	note := func(s string) {
		if w, alive := ownerAlive(s); !alive {
			dead[w] = true
		}
	}
	cs, err := c.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return err
	}
	for _, x := range cs {
		note(x.Labels[LabelCluster])
		for _, n := range x.Names {
			note(strings.TrimPrefix(n, "/"))
		}
	}
	vs, err := c.VolumeList(ctx, volume.ListOptions{})
	if err != nil {
		return err
	}
	for _, v := range vs.Volumes {
		note(v.Name)
		note(v.Labels[LabelCluster])
	}
	ns, err := c.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range ns {
		note(n.Labels[LabelCluster])
		note(strings.TrimPrefix(n.Name, "prebake-"))
	}
	ims, err := c.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return err
	}
	for _, im := range ims {
		for _, ref := range im.RepoTags {
			note(ref)
		}
	}
	var errs []error
	for w := range dead {
		errs = append(errs, removeWorld(ctx, c, w))
	}
	return errors.Join(errs...)
}

// removeWorld removes every container (with its volumes), volume, network and image whose
// name or cluster label starts with prefix, and reports what it could not remove.
func removeWorld(ctx context.Context, c *client.Client, prefix string) error {
	has := func(s string) bool { return s != "" && strings.HasPrefix(s, prefix) }
	var errs []error
	keep := func(err error) {
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	cs, err := c.ContainerList(ctx, container.ListOptions{All: true})
	keep(err)
	for _, x := range cs {
		match := has(x.Labels[LabelCluster])
		for _, n := range x.Names {
			match = match || has(strings.TrimPrefix(n, "/"))
		}
		if match {
			keep(c.ContainerRemove(ctx, x.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}))
		}
	}
	vs, err := c.VolumeList(ctx, volume.ListOptions{})
	keep(err)
	for _, v := range vs.Volumes {
		if has(v.Name) || has(v.Labels[LabelCluster]) {
			keep(c.VolumeRemove(ctx, v.Name, true))
		}
	}
	ns, err := c.NetworkList(ctx, network.ListOptions{})
	keep(err)
	for _, n := range ns {
		if has(n.Labels[LabelCluster]) || has(strings.TrimPrefix(n.Name, "prebake-")) {
			keep(c.NetworkRemove(ctx, n.ID))
		}
	}
	ims, err := c.ImageList(ctx, image.ListOptions{})
	keep(err)
	for _, im := range ims {
		for _, ref := range im.RepoTags {
			if has(ref) {
				_, err := c.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
				keep(err)
			}
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what the engine still holds of prefix: containers, volumes, networks and
// images, one line each.
func Leftovers(ctx context.Context, c *client.Client, prefix string) ([]string, error) {
	has := func(s string) bool { return s != "" && strings.HasPrefix(s, prefix) }
	var out []string
	cs, err := c.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, err
	}
	for _, x := range cs {
		match := has(x.Labels[LabelCluster])
		for _, n := range x.Names {
			match = match || has(strings.TrimPrefix(n, "/"))
		}
		if match {
			out = append(out, fmt.Sprintf("container %v (%s)", x.Names, x.State))
		}
	}
	vs, err := c.VolumeList(ctx, volume.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, v := range vs.Volumes {
		if has(v.Name) || has(v.Labels[LabelCluster]) {
			out = append(out, "volume "+v.Name)
		}
	}
	ns, err := c.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if has(n.Labels[LabelCluster]) || has(strings.TrimPrefix(n.Name, "prebake-")) {
			out = append(out, "network "+n.Name)
		}
	}
	ims, err := c.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, im := range ims {
		for _, ref := range im.RepoTags {
			if has(ref) {
				out = append(out, "image "+ref)
			}
		}
	}
	return out, nil
}

// createNetwork makes a bridge network labelled cluster=name and returns its gateway.
func createNetwork(ctx context.Context, c *client.Client, name string) (string, error) {
	if _, err := c.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Labels: map[string]string{LabelCluster: name}}); err != nil {
		return "", fmt.Errorf("create network %s: %w", name, err)
	}
	ins, err := c.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil {
		return "", fmt.Errorf("inspect network %s: %w", name, err)
	}
	for _, cfg := range ins.IPAM.Config {
		if cfg.Gateway != "" && !strings.Contains(cfg.Gateway, ":") {
			return cfg.Gateway, nil
		}
	}
	return "", fmt.Errorf("network %s has no IPv4 gateway: %+v", name, ins.IPAM.Config)
}

// Exec runs argv in the container and returns its stdout and stderr together, and its exit
// code.
func Exec(ctx context.Context, c *client.Client, id string, argv ...string) (string, int, error) {
	ex, err := c.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", -1, err
	}
	att, err := c.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", -1, err
	}
	defer att.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, att.Reader); err != nil {
		return out.String(), -1, err
	}
	ins, err := c.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return out.String(), -1, err
	}
	return out.String(), ins.ExitCode, nil
}

// readFile reads one file out of a container (running or not).
func readFile(ctx context.Context, c *client.Client, id, path string) ([]byte, error) {
	rc, _, err := c.CopyFromContainer(ctx, id, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(tr, 16<<20))
}

// containersOf lists the containers of a cluster (the docker provider's label).
func containersOf(ctx context.Context, c *client.Client, cluster string, extra ...filters.KeyValuePair) ([]container.Summary, error) {
	f := filters.NewArgs(append(extra, filters.Arg("label", LabelCluster+"="+cluster))...)
	return c.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
}

func startedAt(ins container.InspectResponse) time.Time {
	if ins.State == nil {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, ins.State.StartedAt)
	return t
}

func newClient() (*client.Client, error) {
	return client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
}
