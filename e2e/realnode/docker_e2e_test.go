//go:build e2e

package realnode

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// LabelCluster marks everything a run creates in the engine, so cleanup finds it by label;
// LabelOwnerPID names the test process, so the next run removes what a killed one left.
const (
	LabelCluster  = "prebake.dev/cluster"
	LabelOwnerPID = "prebake.dev/e2e-owner-pid"
)

// engine is the Docker Engine API for one run: every container, volume and network it makes
// carries LabelCluster=cluster.
type engine struct {
	c       *client.Client
	cluster string
	images  []string // removed after the containers, at cleanup
}

func newEngine(t *testing.T, cluster string) *engine {
	t.Helper()
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		missingPrereq(t, fmt.Sprintf("no Docker client: %v", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		missingPrereq(t, fmt.Sprintf("the Docker engine does not answer (%v)", err))
	}
	e := &engine{c: c, cluster: cluster}
	if err := reapOrphans(ctx, c); err != nil {
		t.Fatalf("remove what killed runs left in the engine: %v", err)
	}
	t.Cleanup(func() {
		if err := e.removeAll(context.Background()); err != nil {
			t.Errorf("clean up the engine: %v", err)
		}
		for _, id := range e.images {
			if _, err := c.ImageRemove(context.Background(), id, image.RemoveOptions{}); err != nil {
				t.Errorf("remove image %s: %v", id, err)
			}
		}
		c.Close()
	})
	return e
}

func (e *engine) labels(extra map[string]string) map[string]string {
	l := map[string]string{LabelCluster: e.cluster, LabelOwnerPID: strconv.Itoa(os.Getpid())}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

func (e *engine) filter() filters.Args {
	return filters.NewArgs(filters.Arg("label", LabelCluster+"="+e.cluster))
}

func (e *engine) removeAll(ctx context.Context) error { return removeLabelled(ctx, e.c, e.filter()) }

// reapOrphans removes what runs whose process is gone left behind (a test binary killed by
// a signal runs no cleanup).
func reapOrphans(ctx context.Context, c *client.Client) error {
	owned := filters.NewArgs(filters.Arg("label", LabelOwnerPID))
	cs, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: owned})
	if err != nil {
		return err
	}
	vs, err := c.VolumeList(ctx, volume.ListOptions{Filters: owned})
	if err != nil {
		return err
	}
	ns, err := c.NetworkList(ctx, network.ListOptions{Filters: owned})
	if err != nil {
		return err
	}
	dead := map[string]bool{}
	note := func(labels map[string]string) {
		pid, err := strconv.Atoi(labels[LabelOwnerPID])
		if err == nil && pid > 0 && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return // its process still runs
		}
		dead[labels[LabelCluster]] = true
	}
	for _, x := range cs {
		note(x.Labels)
	}
	for _, x := range vs.Volumes {
		note(x.Labels)
	}
	for _, x := range ns {
		note(x.Labels)
	}
	var errs []error
	for cluster := range dead {
		errs = append(errs, removeLabelled(ctx, c, filters.NewArgs(filters.Arg("label", LabelCluster+"="+cluster))))
	}
	return errors.Join(errs...)
}

// removeLabelled removes every container (with its volumes), volume and network matching f,
// and reports what it could not remove.
func removeLabelled(ctx context.Context, c *client.Client, f filters.Args) error {
	var errs []error
	cs, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	errs = append(errs, err)
	for _, x := range cs {
		errs = append(errs, c.ContainerRemove(ctx, x.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}))
	}
	vs, err := c.VolumeList(ctx, volume.ListOptions{Filters: f})
	errs = append(errs, err)
	for _, v := range vs.Volumes {
		errs = append(errs, c.VolumeRemove(ctx, v.Name, true))
	}
	ns, err := c.NetworkList(ctx, network.ListOptions{Filters: f})
	errs = append(errs, err)
	for _, n := range ns {
		errs = append(errs, c.NetworkRemove(ctx, n.ID))
	}
	return errors.Join(errs...)
}

// createNetwork makes a bridge network and returns its gateway address.
func (e *engine) createNetwork(ctx context.Context, name string) (string, error) {
	if _, err := e.c.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Labels: e.labels(nil)}); err != nil {
		return "", fmt.Errorf("create network %s: %w", name, err)
	}
	ins, err := e.c.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil {
		return "", fmt.Errorf("inspect network %s: %w", name, err)
	}
	for _, c := range ins.IPAM.Config {
		if c.Gateway != "" && !strings.Contains(c.Gateway, ":") {
			return c.Gateway, nil
		}
	}
	return "", fmt.Errorf("network %s has no IPv4 gateway: %+v", name, ins.IPAM.Config)
}

// exec runs argv in the container and returns its stdout and stderr together, and its
// exit code.
func (e *engine) exec(ctx context.Context, id string, argv ...string) (string, int, error) {
	ex, err := e.c.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", -1, err
	}
	att, err := e.c.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", -1, err
	}
	defer att.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, att.Reader); err != nil {
		return out.String(), -1, err
	}
	ins, err := e.c.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return out.String(), -1, err
	}
	return out.String(), ins.ExitCode, nil
}

// tarFiles is a tar stream of files (path without the leading slash → content, mode 0600,
// owned by root) with their parent directories.
func tarFiles(files map[string][]byte) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for path, content := range files {
		parts := strings.Split(path, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: time.Now()}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: 0o600, Size: int64(len(content)), ModTime: time.Now()}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

func volumeCreate(name string, labels map[string]string) volume.CreateOptions {
	return volume.CreateOptions{Name: name, Driver: "local", Labels: labels}
}
