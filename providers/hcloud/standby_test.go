package hcloud

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake/builderssh"
	"github.com/prebake-dev/prebake/providers/hcloud/providerid"
)

// TestStandbyCommandsAreBootstraps: builderssh plays exactly the commands
// prebake runs on a standby.
func TestStandbyCommandsAreBootstraps(t *testing.T) {
	if builderssh.StatusCommand != bootstrap.StandbyStatusCommand || builderssh.JoinCommand != bootstrap.StandbyJoinCommand {
		t.Fatalf("builderssh plays %q and %q; bootstrap has %q and %q",
			builderssh.StatusCommand, builderssh.JoinCommand, bootstrap.StandbyStatusCommand, bootstrap.StandbyJoinCommand)
	}
}

// standbyRig is a fake Hetzner API, a stand-in sshd playing the standbys'
// shells, and the standby login key, shared by every provider a test builds
// over them (a restarted prebake is a new provider).
type standbyRig struct {
	fake  *hcloudfake.Fake
	sshd  *builderssh.Sshd
	shell *builderssh.Standby
	clock *hcloudfake.Clock
	key   []byte
	// log is the order of what reached the cloud and the servers.
	log *eventLog
	// dialed are the addresses the providers dialled.
	dialMu sync.Mutex
	dialed []string
}

// eventLog records "PUT /servers/1001 labels=…", "POST /servers/1001/actions/poweron"
// and "ssh 1001 <command>" in the order they happened.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// index is the position of the first event with prefix, -1 if none.
func (l *eventLog) index(prefix string) int {
	return slices.IndexFunc(l.all(), func(e string) bool { return strings.HasPrefix(e, prefix) })
}

// recorder is the provider's HTTP transport: it notes every request that
// changes something, with the labels a PUT sends, and passes it on.
type recorder struct{ log *eventLog }

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		e := req.Method + " " + strings.TrimPrefix(req.URL.Path, "/v1")
		if req.Method == http.MethodPut && req.Body != nil {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			var b struct{ Labels map[string]string }
			_ = json.Unmarshal(body, &b)
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range b.Labels {
					if !yield(k) {
						return
					}
				}
			})
			e += " labels=" + strings.Join(keys, ",")
		}
		r.log.add(e)
	}
	return http.DefaultTransport.RoundTrip(req)
}

func newStandbyRig(t *testing.T, o hcloudfake.Options) *standbyRig {
	t.Helper()
	clk := hcloudfake.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	o.Now = clk.Now
	f := newFake(t, o)
	r := &standbyRig{fake: f, shell: builderssh.NewStandby(), clock: clk, key: loginKey(t), log: &eventLog{}}
	r.sshd = builderssh.NewShell(f, func(s hcloudfake.Server, command string, stdin io.Reader, stdout, stderr io.Writer) int {
		r.log.add(fmt.Sprintf("ssh %d %s", s.ID, command))
		return r.shell.Shell(s, command, stdin, stdout, stderr)
	})
	t.Cleanup(r.sshd.Close)
	return r
}

// loginKey is a fresh ed25519 key in OpenSSH PEM form, as the Secret holds it.
func loginKey(t *testing.T) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "prebake standby login")
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block)
}

// provider is a provider over the rig as `prebake serve` builds one with
// providers.hcloud.standbySSHKey; edit changes its options.
func (r *standbyRig) provider(t *testing.T, edit ...func(*Options)) *Provider {
	t.Helper()
	o := Options{
		Token: testToken, Endpoint: r.fake.URL(), Cluster: "c", PollInterval: time.Millisecond, MaxRetries: -1,
		Rate: 1000, Burst: 1000, Now: r.clock.Now, StandbySSHKey: r.key,
		HTTPClient: &http.Client{Transport: recorder{r.log}},
		BuilderDial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			r.dialMu.Lock()
			r.dialed = append(r.dialed, addr)
			r.dialMu.Unlock()
			return r.sshd.Dial(ctx, network, addr)
		},
	}
	for _, e := range edit {
		e(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const testCAHash = "sha256:abababababababababababababababababababababababababababababababab"

// standbyRequest is a standby of group pool with the prepare-only
// cloud-config bootstrap renders for it.
func standbyRequest(t *testing.T, name string) providers.CreateRequest {
	t.Helper()
	ud, err := bootstrap.Render(bootstrap.Input{
		Provider: "hcloud", Cluster: bootstrap.Cluster{APIServerEndpoint: "10.0.0.1:6443", CACertHashes: []string{testCAHash}},
		NodeName: name, StandbyResume: bootstrap.ResumeBySSH, Options: bootstrap.Options{Standby: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := request(name, "pool")
	req.UserData, req.Standby = ud.CloudConfig, providers.StandbyStopped
	return req
}

// joinUserData is the cloud-config the core renders for a resume: the whole
// node script, with a fresh join token.
func joinUserData(t *testing.T, name, providerID, token string) []byte {
	t.Helper()
	ud, err := bootstrap.Render(bootstrap.Input{
		Provider: "hcloud", Cluster: bootstrap.Cluster{APIServerEndpoint: "10.0.0.1:6443", CACertHashes: []string{testCAHash}},
		JoinToken: token, NodeName: name, ProviderID: providerID,
	})
	if err != nil {
		t.Fatal(err)
	}
	return ud.CloudConfig
}

// listedAs returns id as List shows it.
func listedAs(t *testing.T, p *Provider, id string) providers.Instance {
	t.Helper()
	all, err := p.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		if in.ProviderID == id {
			return in
		}
	}
	t.Fatalf("List does not show %s", id)
	return providers.Instance{}
}

func serverID(t *testing.T, providerID string) int64 {
	t.Helper()
	id, err := providerid.Parse(providerID)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (r *standbyRig) server(t *testing.T, id int64) hcloudfake.Server {
	t.Helper()
	for _, s := range r.fake.Servers() {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no server %d", id)
	return hcloudfake.Server{}
}

// createParked creates a standby with p, lists it prepared and parks it.
func (r *standbyRig) createParked(t *testing.T, p *Provider, name string) (providers.Instance, int64) {
	t.Helper()
	in, err := p.Create(context.Background(), standbyRequest(t, name))
	if err != nil {
		t.Fatal(err)
	}
	id := serverID(t, in.ProviderID)
	r.shell.SetStatus(id, bootstrap.StatusPrepared, "")
	if got := listedAs(t, p, in.ProviderID); got.Standby.Phase != providers.StandbyPrepared {
		t.Fatalf("a standby whose status says prepared is listed %+v", got.Standby)
	}
	if err := p.Park(context.Background(), in.ProviderID, providers.StandbyStopped); err != nil {
		t.Fatal(err)
	}
	return in, id
}

// TestStandbyCreate: a standby carries the marker and the fingerprint of
// the host key its cloud-config installs, and prebake's login key; the
// prepare-only script is kept; nothing secret of prebake's is in it.
func TestStandbyCreate(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	p := r.provider(t)
	caps := p.Capabilities()
	if !slices.Equal(caps.Standby, []providers.StandbyState{providers.StandbyStopped}) || caps.StandbyResume != bootstrap.ResumeBySSH {
		t.Errorf("Capabilities with a standby key: Standby %v, StandbyResume %q; want [stopped], ssh", caps.Standby, caps.StandbyResume)
	}
	req := standbyRequest(t, "pool-s1")
	in, err := p.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if in.Standby != (providers.Standby{State: providers.StandbyStopped, Phase: providers.StandbyWarming}) {
		t.Errorf("Create returned standby %+v, want stopped, warming", in.Standby)
	}
	s := r.server(t, serverID(t, in.ProviderID))
	if s.Labels[providers.LabelStandby] != "stopped" {
		t.Errorf("labels %v lack %s=stopped", s.Labels, providers.LabelStandby)
	}
	var cc struct {
		Keys       map[string]string `yaml:"ssh_keys"`
		Authorized []string          `yaml:"ssh_authorized_keys"`
		WriteFiles []struct {
			Path string `yaml:"path"`
		} `yaml:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(strings.TrimPrefix(s.UserData, "#cloud-config\n")), &cc); err != nil {
		t.Fatal(err)
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(cc.Keys["ed25519_public"]))
	if err != nil {
		t.Fatalf("the standby's cloud-config has no host key: %v", err)
	}
	pin := s.Labels[LabelStandbyHostKey]
	if pin != hostKeyLabel(hostKey) || !regexp.MustCompile(`^[a-z2-7]{52}$`).MatchString(pin) {
		t.Errorf("label %s=%q, want the host key's fingerprint, 52 lowercase base32 characters (%q)", LabelStandbyHostKey, pin, hostKeyLabel(hostKey))
	}
	login, err := ssh.ParsePrivateKey(r.key)
	if err != nil {
		t.Fatal(err)
	}
	if want := authorizedLine(login.PublicKey(), standbyLoginComment); !slices.Equal(cc.Authorized, []string{want}) {
		t.Errorf("authorized keys %q, want only prebake's %q", cc.Authorized, want)
	}
	if len(cc.WriteFiles) != 1 || cc.WriteFiles[0].Path != bootstrap.ScriptPath {
		t.Errorf("the prepare-only script is gone from the cloud-config: %+v", cc.WriteFiles)
	}
	if strings.Contains(s.UserData, string(r.key)) || strings.Contains(s.UserData, "BEGIN OPENSSH PRIVATE KEY-----\n"+strings.Split(string(r.key), "\n")[1]) {
		t.Error("the login key's private half is in the user-data")
	}

	// Two standbys, two host keys.
	in2, err := p.Create(context.Background(), standbyRequest(t, "pool-s2"))
	if err != nil {
		t.Fatal(err)
	}
	if pin2 := r.server(t, serverID(t, in2.ProviderID)).Labels[LabelStandbyHostKey]; pin2 == pin {
		t.Error("two standbys got the same host key")
	}
	// A retried Create finds the first server and its pinned key.
	again, err := p.Create(context.Background(), req)
	if err != nil || again.ProviderID != in.ProviderID || r.server(t, serverID(t, in.ProviderID)).Labels[LabelStandbyHostKey] != pin {
		t.Errorf("retried Create = %+v, %v; want the same server, key unchanged", again, err)
	}

	// Hetzner has no suspend.
	susp := standbyRequest(t, "pool-s3")
	susp.Standby = providers.StandbySuspended
	if _, err := p.Create(context.Background(), susp); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Errorf("Create of a suspended standby = %v, want ErrStandbyUnsupported", err)
	}
}

// TestStandbyUnsupportedWithoutKey: without providers.hcloud.standbySSHKey
// the provider declares no standby state and refuses every standby call.
func TestStandbyUnsupportedWithoutKey(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	p := r.provider(t, func(o *Options) { o.StandbySSHKey = nil })
	if caps := p.Capabilities(); len(caps.Standby) != 0 || caps.StandbyResume != "" {
		t.Errorf("Capabilities without a key: %v %q", caps.Standby, caps.StandbyResume)
	}
	ctx := context.Background()
	if _, err := p.Create(ctx, standbyRequest(t, "pool-s1")); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Errorf("Create of a standby = %v", err)
	}
	if n := r.fake.Live(); n != 0 {
		t.Errorf("%d servers made", n)
	}
	if err := p.Park(ctx, "hcloud://1", providers.StandbyStopped); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Errorf("Park = %v", err)
	}
	if _, err := p.Resume(ctx, "hcloud://1", nil); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Errorf("Resume = %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"not a key", func(o *Options) { o.StandbySSHKey = []byte("hunter2") }, "standbySSHKey) can't be parsed"},
		{"private without a network", func(o *Options) { o.StandbySSHPrivate = true }, "no network is configured"},
	} {
		o := Options{Token: testToken, Cluster: "c", StandbySSHKey: r.key}
		tc.edit(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: New = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestStandbyWarmingToPrepared: a running standby is warming until a probe
// reads its status file prepared; a List probes a warming standby at most
// once per standbyProbeEvery, and a prepared one no more. A failed script
// lists the standby failed; a wrong host key gets nothing sent and keeps it
// warming.
func TestStandbyWarmingToPrepared(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	p := r.provider(t)
	ctx := context.Background()
	in, err := p.Create(ctx, standbyRequest(t, "pool-s1"))
	if err != nil {
		t.Fatal(err)
	}
	id := serverID(t, in.ProviderID)
	if got := listedAs(t, p, in.ProviderID); got.Standby.Phase != providers.StandbyWarming || got.Error != nil {
		t.Fatalf("a standby without a status is listed %+v", got)
	}
	if n := r.sshd.Logins(); n != 1 {
		t.Fatalf("%d logins after the first List, want 1 probe", n)
	}
	r.shell.SetStatus(id, bootstrap.StatusPrepared, "")
	if got := listedAs(t, p, in.ProviderID); got.Standby.Phase != providers.StandbyWarming || r.sshd.Logins() != 1 {
		t.Fatalf("a List within %s of the last probe: %+v, %d logins; want warming and no probe", standbyProbeEvery, got.Standby, r.sshd.Logins())
	}
	r.clock.Advance(standbyProbeEvery)
	if got := listedAs(t, p, in.ProviderID); got.Standby != (providers.Standby{State: providers.StandbyStopped, Phase: providers.StandbyPrepared}) || got.State != providers.StateRunning {
		t.Fatalf("after the next probe: %+v, want prepared and running", got)
	}
	r.clock.Advance(standbyProbeEvery)
	if got := listedAs(t, p, in.ProviderID); got.Standby.Phase != providers.StandbyPrepared || r.sshd.Logins() != 2 {
		t.Errorf("a prepared standby: %+v, %d logins; want prepared, no more probes", got.Standby, r.sshd.Logins())
	}

	// A failed prepare-only script.
	bad, err := p.Create(ctx, standbyRequest(t, "pool-s2"))
	if err != nil {
		t.Fatal(err)
	}
	r.shell.SetStatus(serverID(t, bad.ProviderID), "failed", "install: apt-get failed")
	got := listedAs(t, p, bad.ProviderID)
	if got.Error == nil || got.Error.Code != codeStandbyFailed || !strings.Contains(got.Error.Message, "install: apt-get failed") {
		t.Errorf("a standby whose script failed is listed %+v (error %+v)", got, got.Error)
	}

	// Another host key: nothing is sent, it stays warming.
	odd, err := p.Create(ctx, standbyRequest(t, "pool-s3"))
	if err != nil {
		t.Fatal(err)
	}
	r.shell.SetStatus(serverID(t, odd.ProviderID), bootstrap.StatusPrepared, "")
	logins := r.sshd.Logins()
	r.sshd.ShowWrongHostKey(1)
	if got := listedAs(t, p, odd.ProviderID); got.Standby.Phase != providers.StandbyWarming || r.sshd.Logins() != logins {
		t.Errorf("a standby showing another host key: %+v, %d new logins; want warming, none", got.Standby, r.sshd.Logins()-logins)
	}
}

// TestStandbyPark: Park powers the standby off, List shows it parked at
// once, and parking it again changes nothing. A server that is no standby
// is refused; so is a park while another action of the server runs
// (Hetzner's 423 locked), which the core retries.
func TestStandbyPark(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	p := r.provider(t)
	ctx := context.Background()
	in, id := r.createParked(t, p, "pool-s1")
	if s := r.server(t, id); s.Status != "off" {
		t.Fatalf("a parked standby is %s", s.Status)
	}
	if got := listedAs(t, p, in.ProviderID); got.Standby != (providers.Standby{State: providers.StandbyStopped, Phase: providers.StandbyParked}) || got.Error != nil {
		t.Errorf("a parked standby is listed %+v", got)
	}
	actions := r.fake.Calls(http.MethodPost, fmt.Sprintf("/servers/%d/actions/shutdown", id))
	if err := p.Park(ctx, in.ProviderID, providers.StandbyStopped); err != nil {
		t.Errorf("Park of a parked standby: %v", err)
	}
	if n := r.fake.Calls(http.MethodPost, fmt.Sprintf("/servers/%d/actions/shutdown", id)); n != actions || actions != 1 {
		t.Errorf("%d shutdowns, then %d after parking again; want 1, 1", actions, n)
	}
	if err := p.Park(ctx, in.ProviderID, providers.StandbySuspended); !errors.Is(err, providers.ErrStandbyUnsupported) {
		t.Errorf("Park suspended = %v, want ErrStandbyUnsupported", err)
	}
	node, err := p.Create(ctx, request("pool-n1", "pool"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Park(ctx, node.ProviderID, providers.StandbyStopped); err == nil || !strings.Contains(err.Error(), "it is no standby") {
		t.Errorf("Park of a node = %v", err)
	}

	// A server with an action under way is locked.
	busy, err := p.Create(ctx, standbyRequest(t, "pool-s2"))
	if err != nil {
		t.Fatal(err)
	}
	r.fake.SetActionDelay(time.Hour)
	if _, _, err := p.client.Server.Poweroff(ctx, &hcloud.Server{ID: serverID(t, busy.ProviderID)}); err != nil {
		t.Fatal(err)
	}
	err = p.Park(ctx, busy.ProviderID, providers.StandbyStopped)
	if cls := p.Classify(err); err == nil || cls.Code != string(hcloud.ErrorCodeLocked) || !cls.Retryable {
		t.Errorf("Park of a locked server = %v, classified %+v; want locked, retryable", err, cls)
	}
}

// TestStandbyResume: the marker goes before the power comes; prebake logs in
// with the host key the label pins and starts the node script of the
// resume's user-data, with its fresh join token; then the pin goes too and
// the server is a node that joins. A second Resume starts nothing more.
func TestStandbyResume(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	p := r.provider(t)
	ctx := context.Background()
	in, id := r.createParked(t, p, "pool-s1")
	const token = "k3x9qa.m2c8v0rty5b7n1zq"
	ud := joinUserData(t, "pool-s1", in.ProviderID, token)
	got, err := p.Resume(ctx, in.ProviderID, ud)
	if err != nil {
		t.Fatal(err)
	}
	if got.ProviderID != in.ProviderID || got.Standby != (providers.Standby{}) || got.State != providers.StateCreating || got.Error != nil {
		t.Errorf("Resume returned %+v, want the server, creating, no standby", got)
	}

	// The order, as the cloud and the server saw it.
	server := fmt.Sprintf("/servers/%d", id)
	put := func(labels ...string) string {
		slices.Sort(labels)
		return "PUT " + server + " labels=" + strings.Join(labels, ",")
	}
	kept := []string{providers.LabelCluster, providers.LabelGroup, providers.LabelImageKind, providers.LabelMachine}
	dropMarker := slices.Index(r.log.all(), put(append(kept, LabelStandbyHostKey)...))
	poweron := r.log.index("POST " + server + "/actions/poweron")
	join := r.log.index(fmt.Sprintf("ssh %d %s", id, bootstrap.StandbyJoinCommand))
	dropPin := slices.Index(r.log.all(), put(kept...))
	if dropMarker < 0 || poweron < dropMarker || join < poweron || dropPin < join {
		t.Errorf("events %q: want the marker dropped (%d), then poweron (%d), then the join (%d), then the pin dropped (%d)", r.log.all(), dropMarker, poweron, join, dropPin)
	}
	scripts := r.shell.Scripts(id)
	want, err := bootstrap.NodeScript(ud)
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) != 1 || scripts[0] != string(want) || !strings.Contains(scripts[0], token) {
		t.Errorf("the server was given %d scripts; want the resume's node script, with its token", len(scripts))
	}
	s := r.server(t, id)
	if s.Status != "running" || s.Labels[providers.LabelStandby] != "" || s.Labels[LabelStandbyHostKey] != "" {
		t.Errorf("after Resume the server is %s with labels %v", s.Status, s.Labels)
	}
	if l := listedAs(t, p, in.ProviderID); l.Standby.Phase != providers.StandbyNone || l.Error != nil {
		t.Errorf("a resumed standby is listed %+v", l)
	}
	if _, err := p.Resume(ctx, in.ProviderID, ud); err != nil || len(r.shell.Scripts(id)) != 1 {
		t.Errorf("a second Resume: %v, %d scripts; want nothing more", err, len(r.shell.Scripts(id)))
	}
}

// TestStandbyResumeRefusals: another host key gets no script (the login is
// refused before anything is sent), and the resume fails with a code of
// its own that the core falls back on; user-data with no node script is
// refused before the marker goes; a server that never answers on SSH fails
// within the call's deadline.
func TestStandbyResumeRefusals(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	p := r.provider(t)
	ctx := context.Background()

	in, id := r.createParked(t, p, "pool-s1")
	if _, err := p.Resume(ctx, in.ProviderID, []byte("#cloud-config\nruncmd: [[reboot]]\n")); err == nil || !strings.Contains(err.Error(), "writes no node script") {
		t.Errorf("Resume with user-data without a node script = %v", err)
	}
	if s := r.server(t, id); s.Labels[providers.LabelStandby] == "" || s.Status != "off" {
		t.Errorf("a refused user-data changed the standby: %s %v", s.Status, s.Labels)
	}

	logins := r.sshd.Logins()
	r.sshd.ShowWrongHostKey(1)
	_, err := p.Resume(ctx, in.ProviderID, joinUserData(t, "pool-s1", in.ProviderID, "k3x9qa.m2c8v0rty5b7n1zq"))
	cls := p.Classify(err)
	if err == nil || cls.Code != codeStandbyHostKey || cls.Retryable || cls.Class != providers.ErrorOther {
		t.Errorf("Resume behind another host key = %v, classified %+v; want %s, not retryable", err, cls, codeStandbyHostKey)
	}
	if n := len(r.shell.Scripts(id)); n != 0 || r.sshd.Logins() != logins {
		t.Errorf("%d scripts, %d logins to a server showing another host key; want none", n, r.sshd.Logins()-logins)
	}
	if s := r.server(t, id); s.Labels[providers.LabelStandby] != "" {
		t.Errorf("the marker is still there after a resume began: %v", s.Labels)
	}

	in2, id2 := r.createParked(t, p, "pool-s2")
	r.sshd.SetReady(func(s hcloudfake.Server) bool { return s.ID != id2 })
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = p.Resume(dctx, in2.ProviderID, joinUserData(t, "pool-s2", in2.ProviderID, "k3x9qa.m2c8v0rty5b7n1zq"))
	if cls := p.Classify(err); err == nil || cls.Code != codeStandbyUnreachable || !strings.Contains(err.Error(), "port 22") {
		t.Errorf("Resume of a standby whose sshd never answers = %v, classified %+v; want %s, saying what to open", err, cls, codeStandbyUnreachable)
	}
}

// TestStandbyResumeWaitsForSSH: a standby's sshd that refuses at first (it
// boots) is tried again until it answers.
func TestStandbyResumeWaitsForSSH(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	p := r.provider(t)
	in, id := r.createParked(t, p, "pool-s1")
	var mu sync.Mutex
	refused := 0
	r.sshd.SetReady(func(s hcloudfake.Server) bool {
		mu.Lock()
		defer mu.Unlock()
		if s.ID == id && refused < 3 {
			refused++
			return false
		}
		return true
	})
	if _, err := p.Resume(context.Background(), in.ProviderID, joinUserData(t, "pool-s1", in.ProviderID, "k3x9qa.m2c8v0rty5b7n1zq")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if refused != 3 || len(r.shell.Scripts(id)) != 1 {
		t.Errorf("%d refused dials, %d scripts; want 3 and then the join", refused, len(r.shell.Scripts(id)))
	}
}

// TestStandbyRestart: what a standby is lives in the cloud. A new provider
// (a restarted prebake) lists a parked standby parked, probes a warming one
// with the key its label pins, and resumes the parked one.
func TestStandbyRestart(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	first := r.provider(t)
	ctx := context.Background()
	parked, id := r.createParked(t, first, "pool-s1")
	warming, err := first.Create(ctx, standbyRequest(t, "pool-s2"))
	if err != nil {
		t.Fatal(err)
	}

	p := r.provider(t)
	if got := listedAs(t, p, parked.ProviderID); got.Standby != (providers.Standby{State: providers.StandbyStopped, Phase: providers.StandbyParked}) || got.Group != "pool" || got.Error != nil {
		t.Errorf("after a restart the parked standby is listed %+v", got)
	}
	r.shell.SetStatus(serverID(t, warming.ProviderID), bootstrap.StatusPrepared, "")
	r.clock.Advance(standbyProbeEvery)
	if got := listedAs(t, p, warming.ProviderID); got.Standby.Phase != providers.StandbyPrepared {
		t.Errorf("after a restart a prepared standby is listed %+v", got.Standby)
	}
	if _, err := p.Resume(ctx, parked.ProviderID, joinUserData(t, "pool-s1", parked.ProviderID, "k3x9qa.m2c8v0rty5b7n1zq")); err != nil {
		t.Fatalf("Resume after a restart: %v", err)
	}
	if n := len(r.shell.Scripts(id)); n != 1 {
		t.Errorf("%d scripts after a restart's resume, want 1", n)
	}
}

// TestStandbyTakeCutShort: a prebake killed between dropping the marker and
// the power-on leaves a powered-off server that is neither a standby nor
// started: the next List reports it failed, so CA deletes it at once. A
// take under way in this process is not; a resumed server powered off
// later is an ordinary node. A retried Resume of a server that runs its
// join already starts none; one whose join failed is an error.
func TestStandbyTakeCutShort(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	p := r.provider(t)
	ctx := context.Background()
	in, id := r.createParked(t, p, "pool-s1")
	s, _, err := p.client.Server.GetByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.dropLabel(ctx, s, providers.LabelStandby); err != nil {
		t.Fatal(err)
	}
	p.setResuming(id, true)
	if got := listedAs(t, p, in.ProviderID); got.Error != nil || got.Standby.Phase != providers.StandbyNone {
		t.Errorf("a take under way is listed %+v (error %+v)", got, got.Error)
	}
	p.setResuming(id, false)
	restarted := r.provider(t)
	got := listedAs(t, restarted, in.ProviderID)
	if got.Error == nil || got.Error.Code != codeTakeInterrupted || got.Standby.Phase != providers.StandbyNone {
		t.Errorf("a take cut short is listed %+v (error %+v), want failed with %s", got, got.Error, codeTakeInterrupted)
	}

	// Resumed, then powered off by someone: a node like any other.
	ud := joinUserData(t, "pool-s1", in.ProviderID, "k3x9qa.m2c8v0rty5b7n1zq")
	if _, err := restarted.Resume(ctx, in.ProviderID, ud); err != nil {
		t.Fatal(err)
	}
	if err := restarted.stopServer(ctx, id, time.Minute, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := listedAs(t, r.provider(t), in.ProviderID); got.Error != nil {
		t.Errorf("a resumed node powered off later is listed failed: %+v", got.Error)
	}

	// A retry finds a join under way: none is started twice.
	in2, id2 := r.createParked(t, p, "pool-s2")
	ud2 := joinUserData(t, "pool-s2", in2.ProviderID, "k3x9qa.m2c8v0rty5b7n1zq")
	if err := p.startServer(ctx, id2); err != nil {
		t.Fatal(err)
	}
	r.shell.SetStatus(id2, "running", "")
	s2, _, err := p.client.Server.GetByID(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.dropLabel(ctx, s2, providers.LabelStandby); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Resume(ctx, in2.ProviderID, ud2); err != nil || len(r.shell.Scripts(id2)) != 0 {
		t.Errorf("Resume of a server whose join runs: %v, %d scripts; want none started", err, len(r.shell.Scripts(id2)))
	}
	in3, id3 := r.createParked(t, p, "pool-s3")
	if err := p.startServer(ctx, id3); err != nil {
		t.Fatal(err)
	}
	r.shell.SetStatus(id3, "failed", "join: kubeadm join failed")
	_, err = p.Resume(ctx, in3.ProviderID, joinUserData(t, "pool-s3", in3.ProviderID, "k3x9qa.m2c8v0rty5b7n1zq"))
	if cls := p.Classify(err); err == nil || cls.Code != codeStandbyJoin || !strings.Contains(err.Error(), "kubeadm join failed") {
		t.Errorf("Resume of a server whose join failed = %v (%+v)", err, cls)
	}
}

// TestStandbyPrivateAddress: with standbySSHAddress private, prebake dials
// a standby at its IP in the first configured network.
func TestStandbyPrivateAddress(t *testing.T) {
	t.Parallel()
	r := newStandbyRig(t, hcloudfake.Options{})
	p := r.provider(t, func(o *Options) { o.Networks, o.StandbySSHPrivate = []int64{7}, true })
	in, id := r.createParked(t, p, "pool-s1")
	if _, err := p.Resume(context.Background(), in.ProviderID, joinUserData(t, "pool-s1", in.ProviderID, "k3x9qa.m2c8v0rty5b7n1zq")); err != nil {
		t.Fatal(err)
	}
	s := r.server(t, id)
	r.dialMu.Lock()
	defer r.dialMu.Unlock()
	if len(s.PrivateIPs) != 1 || len(r.dialed) == 0 {
		t.Fatalf("server private IPs %v, dialled %v", s.PrivateIPs, r.dialed)
	}
	for _, a := range r.dialed {
		if a != net.JoinHostPort(s.PrivateIPs[0], "22") {
			t.Errorf("dialled %s, want only the private %s:22 (public is %s)", a, s.PrivateIPs[0], s.IPv4)
		}
	}
}
