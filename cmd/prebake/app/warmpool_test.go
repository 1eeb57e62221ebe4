package app

import (
	"strings"
	"testing"
	"time"

	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/fake"
)

// A warm pool on a group whose provider parks nothing is a config error
// that names the group and the field, before anything listens.
func TestWarmPoolOnAProviderThatCantParkIsAConfigError(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	cfg := goodConfig + "    warmPool: {size: 1}\n"
	err := Run(t.Context(), Options{ConfigPath: writeConfig(t, cfg), Listen: freeAddr(t), ShutdownTimeout: time.Second})
	want := `:13: node group "small": nodeGroups[0].warmPool: provider kwok can't keep standbys stopped (it declares no standby state, so it can't park machines)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run = %v, want %q", err, want)
	}
}

// A standby's user-data prepares the machine and holds no join token; the
// user-data of its resume holds a fresh one.
func TestStandbyUserDataHoldsNoTokenUntilTaken(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	p := fake.New()
	p.Standby = []providers.StandbyState{providers.StandbyStopped}
	g := autoscaling.GroupSpec{ID: "g1", Provider: "fake", MinSize: 0, MaxSize: 10, MachineType: "m1", Zone: "z1",
		WarmPool: autoscaling.WarmPool{Size: 1, State: providers.StandbyStopped}}
	c := startCore(t, p, func(o *autoscaling.Options) { o.UserData = bootstrapSource(client) }, g)
	c.TendPools(t.Context())
	req := nthRequest(t, p, 1)
	ud := string(req.UserData)
	if req.Standby != providers.StandbyStopped || !strings.HasPrefix(ud, "#cloud-config") || !strings.Contains(ud, "PREBAKE_STANDBY='1'") {
		t.Fatalf("standby request: standby %q, user-data %.200q", req.Standby, ud)
	}
	if strings.Contains(ud, "kubeadm-join.yaml'") || joinTokens(t, client) != 0 {
		t.Errorf("a standby's user-data writes a join config or made a token (%d tokens)", joinTokens(t, client))
	}
	id := "fake://" + req.Name
	eventually(t, "the standby parked", func() bool {
		p.PrepareStandbys()
		c.Sync(t.Context(), true)
		c.TendPools(t.Context())
		m, _ := p.Machine(id)
		return m.Stopped
	})
	if err := c.IncreaseSize("g1", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the standby resumed", func() bool { m, _ := p.Machine(id); return !m.Stopped })
	m, _ := p.Machine(id)
	if got := string(m.UserData); !strings.Contains(got, "PREBAKE_STANDBY='0'") || !strings.Contains(got, "token: ") || joinTokens(t, client) != 1 {
		t.Errorf("resume user-data %.200q with %d tokens, want the joining script and one fresh token", got, joinTokens(t, client))
	}
}

// Ignition reads its config at first boot only: a standby of an Ignition
// image can't be rendered.
func TestIgnitionStandbyIsRefused(t *testing.T) {
	t.Parallel()
	b := bootstrapSource(kubefake.NewClientset())
	m := autoscaling.Machine{Provider: "gce", Capabilities: providers.Capabilities{UserData: providers.UserDataCloudInit},
		Request: providers.CreateRequest{Name: "g1-a", Group: "g1", Image: "img", Standby: providers.StandbyStopped},
		Family:  imagecatalog.FamilyFlatcar}
	b.Sysext = func(string) bootstrap.Sysext { return bootstrap.Sysext{} }
	if _, err := b.UserData(t.Context(), m); err == nil || !strings.Contains(err.Error(), "reads Ignition at first boot only") {
		t.Errorf("UserData of an Ignition standby = %v", err)
	}
}

// A provider that declares a resume hook gets it in its standbys'
// user-data, and only there: the user-data of the resume joins without it.
func TestStandbyResumeHookFollowsTheProvider(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	b := bootstrapSource(client)
	caps := providers.Capabilities{UserData: providers.UserDataCloudInit, StandbyResume: bootstrap.ResumeByGCEMetadata}
	m := autoscaling.Machine{Provider: "gce", Capabilities: caps,
		Request: providers.CreateRequest{Name: "g1-a", Group: "g1", Standby: providers.StandbyStopped}}
	standby, err := b.UserData(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(standby); !strings.Contains(s, "PREBAKE_STANDBY_RESUME='gce-metadata'") || !strings.Contains(s, bootstrap.StandbyResumeUnitPath) {
		t.Errorf("the standby's user-data lacks the resume hook: %.300q", s)
	}
	m.Request.Standby = ""
	joining, err := b.UserData(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(joining); !strings.Contains(s, "PREBAKE_STANDBY_RESUME=''") || strings.Contains(s, bootstrap.StandbyResumeUnitPath) {
		t.Errorf("the resume's user-data installs the hook: %.300q", s)
	}
}
