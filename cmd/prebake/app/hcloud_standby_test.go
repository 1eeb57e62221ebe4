package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/config"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake/builderssh"
)

// With providers.hcloud.standbySSHKey (a mounted Secret's file) the hcloud
// provider keeps standbys stopped and joins them over SSH; its standbys'
// user-data says so, and the user-data of a resume holds the node script
// the provider pipes. Without the key it keeps none.
func TestHcloudStandbyKeyFromConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	build := func(extra string) providers.Capabilities {
		t.Helper()
		path := filepath.Join(dir, "config.yaml")
		body := "apiVersion: prebake.dev/v1alpha1\nkind: ProviderConfig\nclusterName: test\nproviders:\n" +
			"  hcloud: {token: {file: " + tokenFile + "}" + extra + "}\n" +
			"nodeGroups:\n  - {id: g, provider: hcloud, maxSize: 3, machineType: cx22, location: fsn1}\n"
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewProvider(context.Background(), cfg, "hcloud", Deps{})
		if err != nil {
			t.Fatal(err)
		}
		return b.Provider.Capabilities()
	}
	if caps := build(""); len(caps.Standby) != 0 {
		t.Errorf("hcloud without standbySSHKey declares standbys %v", caps.Standby)
	}
	caps := build(", standbySSHKey: {file: " + keyFile + "}")
	if !slices.Equal(caps.Standby, []providers.StandbyState{providers.StandbyStopped}) || caps.StandbyResume != bootstrap.ResumeBySSH {
		t.Fatalf("hcloud with standbySSHKey: Standby %v, StandbyResume %q; want [stopped], ssh", caps.Standby, caps.StandbyResume)
	}

	b := bootstrapSource(kubefake.NewClientset())
	m := autoscaling.Machine{Provider: "hcloud", Capabilities: caps,
		Request: providers.CreateRequest{Name: "g-a", Group: "g", Standby: providers.StandbyStopped}}
	standby, err := b.UserData(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(standby); !strings.Contains(s, "PREBAKE_STANDBY_RESUME='ssh'") || strings.Contains(s, bootstrap.StandbyResumeUnitPath) {
		t.Errorf("an hcloud standby's user-data: %.300q", s)
	}
	m.Request.Standby, m.ProviderID = "", "hcloud://1001"
	joining, err := b.UserData(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	script, err := bootstrap.NodeScript(joining)
	if err != nil || !strings.Contains(string(script), "PREBAKE_STANDBY='0'") {
		t.Errorf("the resume's user-data has no joining node script to pipe: %v", err)
	}
}

// TestHcloudWarmPoolThroughTheCore: the core over the hcloud provider over
// the fake API, with a stand-in sshd playing the standby: the pool creates a
// standby with prepare-only user-data, lists it prepared once its status
// file says so, parks it powered off, and a scale-up takes it: the standby is
// powered on and given the node script with a fresh join token over SSH.
func TestHcloudWarmPoolThroughTheCore(t *testing.T) {
	t.Parallel()
	clk := hcloudfake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	f := hcloudfake.New(hcloudfake.Options{Token: "t", Now: clk.Now})
	t.Cleanup(f.Close)
	shell := builderssh.NewStandby()
	sshd := builderssh.NewShell(f, shell.Shell)
	t.Cleanup(sshd.Close)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := hcloud.New(hcloud.Options{Token: "t", Endpoint: f.URL(), Cluster: "test", Now: clk.Now,
		RetryBase: time.Millisecond, MaxRetries: -1, Rate: 1000, Burst: 1000, PollInterval: time.Millisecond,
		StandbySSHKey: pem.EncodeToMemory(block), BuilderDial: sshd.Dial})
	if err != nil {
		t.Fatal(err)
	}
	client := kubefake.NewClientset()
	c := startCore(t, p, func(o *autoscaling.Options) { o.UserData = bootstrapSource(client) },
		autoscaling.GroupSpec{ID: "g", Provider: "hcloud", MaxSize: 3, MachineType: "cx22", Zone: "fsn1",
			WarmPool: autoscaling.WarmPool{Size: 1, State: providers.StandbyStopped}})
	c.TendPools(t.Context())
	eventually(t, "the standby created", func() bool { return len(f.Servers()) == 1 })
	s := f.Servers()[0]
	if s.Labels[providers.LabelStandby] != "stopped" || !strings.Contains(s.UserData, "PREBAKE_STANDBY_RESUME='ssh'") {
		t.Fatalf("the standby: labels %v, user-data %.300q", s.Labels, s.UserData)
	}
	shell.SetStatus(s.ID, bootstrap.StatusPrepared, "")
	eventually(t, "the standby parked", func() bool {
		clk.Advance(time.Minute) // past the provider's probe interval
		c.Sync(t.Context(), true)
		c.TendPools(t.Context())
		v, _ := c.Pool("g")
		return v.Parked == 1
	})
	if s = f.Servers()[0]; s.Status != "off" {
		t.Fatalf("a parked standby is %s", s.Status)
	}
	if err := c.IncreaseSize("g", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the standby given its join", func() bool { return len(shell.Scripts(s.ID)) == 1 })
	script := shell.Scripts(s.ID)[0]
	if !strings.HasPrefix(script, "#!/bin/sh\n") || !strings.Contains(script, "PREBAKE_STANDBY='0'") || !strings.Contains(script, "token: ") || joinTokens(t, client) != 1 {
		t.Errorf("the script piped to the standby does not join with a fresh token (%d tokens)", joinTokens(t, client))
	}
	// The taken standby is a node now; the pool refills with a new one.
	for _, got := range f.Servers() {
		switch {
		case got.ID == s.ID && (got.Status != "running" || got.Labels[providers.LabelStandby] != ""):
			t.Errorf("after the take the standby is %s with labels %v; want it running, a node", got.Status, got.Labels)
		case got.ID != s.ID && got.Labels[providers.LabelStandby] != "stopped":
			t.Errorf("server %d after the take: labels %v; want only the pool's new standby", got.ID, got.Labels)
		}
	}
}
