//go:build e2e

package realnode

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/crypto/ssh"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/e2e/wait"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/docker"
	"github.com/prebake-dev/prebake/providers/hcloud"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// TestHcloudStandbyOverSSHOnARealMachine runs the hcloud provider's warm-pool standby over
// SSH against a real machine: the Hetzner API is the fake, but the "server" is a docker node
// (systemd, Debian 12's cloud-init, OpenSSH) booted with exactly the user_data the provider
// sent the fake, and powered off and on as the fake says. Proven here and nowhere else:
// cloud-init installs the host key prebake made (ssh_keys, ssh_deletekeys) and prebake's
// login key for root (disable_root: false); OpenSSH shows that key, which matches the
// label's fingerprint; the status file is read over SSH; after the power-on the piped script
// runs as the transient unit prebake-join.service and goes on after the SSH session ended.
// The node script here is a stand-in (it writes the status file and a mark): the join itself
// is the other scenarios'.
func TestHcloudStandbyOverSSHOnARealMachine(t *testing.T) {
	w := needWorld(t)
	ctx := t.Context()
	sshdImage := sshdImage(t, w)
	cluster := w.Name + "-hs"

	// The machine: the docker provider boots the user_data the fake got, on its own network.
	dp, err := docker.New(docker.Options{Cluster: cluster, BaseImage: sshdImage, NamePrefix: cluster + "-"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := removeWorld(ctx, w.Engine, cluster); err != nil {
			t.Errorf("remove %s: %v", cluster, err)
		}
	})
	f := hcloudfake.New(hcloudfake.Options{Token: "t"})
	t.Cleanup(f.Close)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "prebake standby login")
	if err != nil {
		t.Fatal(err)
	}
	var machine struct {
		sync.Mutex
		id, addr string
	}
	var dialed []string
	hp, err := hcloud.New(hcloud.Options{Token: "t", Endpoint: f.URL(), Cluster: cluster, Image: "debian-12", PollInterval: 100 * time.Millisecond,
		MaxRetries: -1, Rate: 1000, Burst: 1000, StandbySSHKey: pem.EncodeToMemory(block),
		// The fake's addresses are TEST-NET-1, never dialled: the machine stands in for them.
		BuilderDial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			machine.Lock()
			to := machine.addr
			dialed = append(dialed, addr)
			machine.Unlock()
			if to == "" {
				return nil, fmt.Errorf("no machine behind %s yet", addr)
			}
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(to, "22"))
		}})
	if err != nil {
		t.Fatal(err)
	}

	// A stand-in node script: the standby's says prepared; the resume's sleeps past the SSH
	// session, then notes the unit it runs in and says ok.
	prepare := standInCloudConfig(t, `status prepared`)
	req := providers.CreateRequest{Name: "hs-standby", Cluster: cluster, Group: "pool", MachineType: "cx22", Location: "nbg1",
		ImageKind: providers.ImageRuntimeInstall, UserData: prepare, Standby: providers.StandbyStopped}
	in, err := hp.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	srv := f.Servers()[0]
	if !strings.Contains(srv.UserData, "ssh_keys") || srv.Labels[hcloud.LabelStandbyHostKey] == "" {
		t.Fatalf("the standby's user_data has no host key, or its labels %v no fingerprint", srv.Labels)
	}
	mt := docker.DefaultMachineTypes()[0].Name
	mi, err := dp.Create(ctx, providers.CreateRequest{Name: "hs-standby", Cluster: cluster, Group: "pool", MachineType: mt,
		Location: "zone-a", ImageKind: providers.ImageRuntimeInstall, UserData: []byte(srv.UserData)})
	if err != nil {
		t.Fatal(err)
	}
	ct, err := w.containerOf(ctx, mi.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	machine.Lock()
	machine.id, machine.addr = ct.ID, containerIP(ct)
	machine.Unlock()
	t.Logf("server %d (%s) is container %.12s at %s", srv.ID, in.ProviderID, ct.ID, machine.addr)

	// Warming → prepared: over SSH, with the pinned host key, once cloud-init ran.
	began := time.Now()
	if err := wait.Poll(ctx, 5*time.Minute, time.Second, func(ctx context.Context) (bool, error) {
		got, err := listed(ctx, hp, in.ProviderID)
		if err != nil || got.Error != nil {
			return false, fmt.Errorf("list: %v %+v", err, got.Error)
		}
		return got.Standby.Phase == providers.StandbyPrepared, nil
	}); err != nil {
		t.Fatalf("the standby never listed prepared: %v\n%s", err, cloudInitLog(ctx, w, ct.ID))
	}
	t.Logf("listed prepared %s after the machine was created (cloud-init, sshd, the status read over SSH)", time.Since(began).Round(time.Millisecond))
	if keys := execOut(t, w, ct.ID, "sh", "-c", "ls /etc/ssh/ssh_host_*_key.pub"); strings.TrimSpace(keys) != "/etc/ssh/ssh_host_ed25519_key.pub" {
		t.Errorf("host keys on the machine: %q; want only the ed25519 key prebake made (ssh_deletekeys)", keys)
	}

	// Park: the fake powers the server off; the machine goes off with it.
	if err := hp.Park(ctx, in.ProviderID, providers.StandbyStopped); err != nil {
		t.Fatal(err)
	}
	timeout := 30
	if err := w.Engine.ContainerStop(ctx, ct.ID, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if got, err := listed(ctx, hp, in.ProviderID); err != nil || got.Standby.Phase != providers.StandbyParked {
		t.Fatalf("after Park: %+v, %v; want parked", got.Standby, err)
	}

	// Resume: the fake powers it on; the machine boots when the fake says running.
	powered := make(chan error, 1)
	go func() {
		powered <- wait.Poll(ctx, 2*time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			if s := f.Servers()[0]; s.Status != "running" {
				return false, nil
			}
			return true, w.Engine.ContainerStart(ctx, ct.ID, container.StartOptions{})
		})
	}()
	joinUD := standInCloudConfig(t, `sleep 3; cat /proc/self/cgroup > /root/joined-in; status ok`)
	resumed := time.Now()
	rin, err := hp.Resume(ctx, in.ProviderID, joinUD)
	if err != nil {
		t.Fatalf("Resume: %v\n%s", err, cloudInitLog(ctx, w, ct.ID))
	}
	returned := time.Since(resumed)
	if err := <-powered; err != nil {
		t.Fatal(err)
	}
	if rin.Standby.Phase != providers.StandbyNone {
		t.Errorf("Resume returned %+v, want no standby", rin.Standby)
	}
	t.Logf("Resume returned after %s (marker dropped, power-on, the machine's boot, sshd, the script started)", returned.Round(time.Millisecond))
	if err := wait.Poll(ctx, time.Minute, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		st, ok, err := Status(ctx, w.Engine, ct.ID)
		return err == nil && ok && st.Result == "ok", nil
	}); err != nil {
		t.Fatalf("the piped script never said ok: %v", err)
	}
	if cg := execOut(t, w, ct.ID, "cat", "/root/joined-in"); !strings.Contains(cg, "prebake-join.service") {
		t.Errorf("the script ran in %q, want the transient unit prebake-join.service", cg)
	}
	s := f.Servers()[0]
	if s.Labels[providers.LabelStandby] != "" || s.Labels[hcloud.LabelStandbyHostKey] != "" {
		t.Errorf("after the resume the server's labels %v keep a standby label", s.Labels)
	}
	machine.Lock()
	t.Logf("dialled %d times, at %v (the fake's addresses)", len(dialed), dialed[0])
	machine.Unlock()
	if err := dp.Delete(ctx, mi.ProviderID); err != nil {
		t.Error(err)
	}
}

// standInCloudConfig is a cloud-config as bootstrap renders it (the node script at
// bootstrap.ScriptPath, run by runcmd) whose script runs body, with `status R` writing the
// status file's result R.
func standInCloudConfig(t *testing.T, body string) []byte {
	t.Helper()
	script := "#!/bin/sh\nset -eu\nstatus() { mkdir -p " + pathDir(bootstrap.DefaultStatusPath) +
		"; printf '{\"version\":1,\"result\":\"%s\"}\\n' \"$1\" > " + bootstrap.DefaultStatusPath + "; }\n" + body + "\n"
	content, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	return []byte("#cloud-config\nwrite_files:\n  - path: " + bootstrap.ScriptPath + "\n    owner: root:root\n    permissions: \"0700\"\n    content: " +
		string(content) + "\nruncmd:\n  - [sh, " + bootstrap.ScriptPath + "]\n")
}

func pathDir(p string) string { return p[:strings.LastIndexByte(p, '/')] }

// sshdImage is the base image with OpenSSH's server installed (a Hetzner image has one; the
// docker base image does not), committed once per world.
func sshdImage(t *testing.T, w *World) string {
	t.Helper()
	ref := w.Name + "-sshd:1"
	if _, err := w.Engine.ImageInspect(t.Context(), ref); err == nil {
		return ref
	}
	base, err := w.Engine.ImageInspect(t.Context(), w.Base.Ref)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c, err := w.Engine.ContainerCreate(ctx, &container.Config{Image: w.Base.Ref, Entrypoint: []string{"/bin/sh", "-c"},
		Cmd: []string{"apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server >/dev/null && apt-get clean"}},
		&container.HostConfig{NetworkMode: container.NetworkMode(w.Network)}, nil, nil, w.Name+"-sshd-build")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Engine.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	began := time.Now()
	if err := w.Engine.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	waitC, errC := w.Engine.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	select {
	case r := <-waitC:
		if r.StatusCode != 0 {
			logs, _ := w.Engine.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
			var b strings.Builder
			if logs != nil {
				io.Copy(&b, logs)
			}
			t.Fatalf("install openssh-server: exit %d\n%s", r.StatusCode, b.String())
		}
	case err := <-errC:
		t.Fatal(err)
	}
	entry, err := json.Marshal(base.Config.Entrypoint)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := json.Marshal(base.Config.Cmd)
	if err != nil {
		t.Fatal(err)
	}
	changes := []string{"ENTRYPOINT " + string(entry)}
	if len(base.Config.Cmd) > 0 {
		changes = append(changes, "CMD "+string(cmd))
	}
	if _, err := w.Engine.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: ref, Changes: changes}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: the base image with openssh-server, made in %s", ref, time.Since(began).Round(time.Second))
	return ref
}

// listed is id as p lists it.
func listed(ctx context.Context, p providers.Provider, id string) (providers.Instance, error) {
	all, err := p.List(ctx)
	if err != nil {
		return providers.Instance{}, err
	}
	for _, in := range all {
		if in.ProviderID == id {
			return in, nil
		}
	}
	return providers.Instance{}, fmt.Errorf("%s is not listed", id)
}

func containerIP(c container.InspectResponse) string {
	for _, n := range c.NetworkSettings.Networks {
		if n.IPAddress != "" {
			return n.IPAddress
		}
	}
	return ""
}

func execOut(t *testing.T, w *World, id string, argv ...string) string {
	t.Helper()
	out, code, err := Exec(t.Context(), w.Engine, id, argv...)
	if err != nil || code != 0 {
		t.Fatalf("%v in %.12s: exit %d, %v: %s", argv, id, code, err, out)
	}
	return out
}

// cloudInitLog is the machine's cloud-init output, for a failure's message.
func cloudInitLog(ctx context.Context, w *World, id string) string {
	b, err := readFile(ctx, w.Engine, id, CloudInitLog)
	if err != nil {
		return fmt.Sprintf("(no cloud-init output log: %v)", err)
	}
	return "----- /var/log/cloud-init-output.log -----\n" + string(b)
}
