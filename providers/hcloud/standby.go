package hcloud

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"golang.org/x/crypto/ssh"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/hcloud/providerid"
)

// Warm-pool standbys (docs/warm-pool.md). A Hetzner server's user_data is
// fixed when it is created, and a server can't read its own labels without
// a project token, so a standby can't be handed its join the way docker and
// GCE hand it: prebake logs in over SSH and runs it (bootstrap.ResumeBySSH).
//
//   - Create gives the standby a host key prebake made for it and prebake's
//     standby login key (Options.StandbySSHKey) in its prepare-only
//     cloud-config, and labels it with the standby marker
//     (providers.LabelStandby) and the host key's fingerprint
//     (LabelStandbyHostKey). prebake keeps nothing in memory: a restarted
//     prebake checks the key a standby shows against its label, so no key is
//     trusted on first use.
//   - List shows a running standby warming until a probe over SSH reads its
//     status file prepared (or failed); each warming standby is probed at
//     most once per standbyProbeEvery, all at once, each bounded by
//     standbyProbeTimeout, so the cost is bounded and List never waits on a
//     standby for long. A powered-off standby is parked.
//   - Park powers the server off: an ACPI shutdown, then poweroff if the OS
//     does not halt (power.go).
//   - Resume removes the marker first, so no server is ever both a standby
//     and joined, powers the server on, waits (bounded) for its sshd with the
//     pinned host key, and starts the resume's node script there
//     (bootstrap.StandbyJoinCommand) as cloud-init's runcmd would; then the
//     fingerprint label goes too. A server whose marker is gone but which
//     still has the fingerprint label and is powered off is a take that was
//     cut short (prebake died between the label and the power): List reports
//     it failed, so CA deletes it at once.

// standbyStates are the states Capabilities declares: Hetzner has no
// suspend.
var standbyStates = []providers.StandbyState{providers.StandbyStopped}

const (
	// standbyProbeEvery is the least time between two probes of one
	// warming standby.
	standbyProbeEvery = 10 * time.Second
	// standbyProbeTimeout bounds one probe: connect, handshake, status.
	standbyProbeTimeout = 10 * time.Second
	// standbyProbeParallel is how many standbys a List probes at once.
	standbyProbeParallel = 8
	// standbySSHWait bounds how long Resume waits for a powered-on
	// standby's sshd (a boot takes seconds to tens of seconds); the
	// provider call's own deadline may end it sooner.
	standbySSHWait = 3 * time.Minute
	// standbyLoginComment ends prebake's line in a standby's
	// authorized_keys.
	standbyLoginComment = "prebake-standby"
)

// standbyAccess is how prebake logs in to standbys.
type standbyAccess struct {
	signer ssh.Signer
	// network is the network whose IP prebake dials; 0 dials the public
	// IPv4.
	network int64
}

func newStandbyAccess(key []byte, private bool, networks []int64) (*standbyAccess, error) {
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, errors.New("hcloud: the standby SSH key (providers.hcloud.standbySSHKey) is encrypted; give an unencrypted key (it is read from a file or variable you protect)")
		}
		return nil, fmt.Errorf("hcloud: the standby SSH key (providers.hcloud.standbySSHKey) can't be parsed (want PEM or OpenSSH format): %w", err)
	}
	a := &standbyAccess{signer: signer}
	if private {
		if len(networks) == 0 {
			return nil, errors.New("hcloud: standbys are to be reached at their private IP, but no network is configured (providers.hcloud.networks); add one, or use standbySSHAddress: public")
		}
		a.network = networks[0]
	}
	return a, nil
}

// standbyProbe is what the probes learned of one warming standby.
type standbyProbe struct {
	at time.Time // the last probe
	// result is bootstrap.StatusPrepared or "failed" once the status file
	// said so, "" before; errMsg is the script's error when it failed.
	result, errMsg string
}

// hostKeyLabel is the value of LabelStandbyHostKey that pins key: the
// SHA-256 of its wire form, lowercase base32 without padding: 52
// characters, all alphanumeric, where a Hetzner label value may have 63.
func hostKeyLabel(key ssh.PublicKey) string {
	sum := sha256.Sum256(key.Marshal())
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))
}

// standbyHostKeyMismatch is a standby that showed another host key than the
// one its label pins.
type standbyHostKeyMismatch struct {
	server int64
	got    ssh.PublicKey
}

func (e *standbyHostKeyMismatch) Error() string {
	return fmt.Sprintf("server %d shows host key %s, not the one its label %s pins: someone else answers at its address; nothing was sent", e.server, ssh.FingerprintSHA256(e.got), LabelStandbyHostKey)
}

// standbyError is a resume that failed on the server's side, with the
// stable code Classify gives it. A retry would meet the same, so none is
// retryable: the core deletes the standby and creates a machine.
type standbyError struct {
	code string
	err  error
}

func (e *standbyError) Error() string { return e.err.Error() }
func (e *standbyError) Unwrap() error { return e.err }

// Codes of standbyError and of the errors List gives standbys.
const (
	codeStandbyFailed      = "standby_failed"
	codeStandbyNoHostKey   = "standby_no_host_key"
	codeStandbyUnreachable = "standby_ssh_unreachable"
	codeStandbyHostKey     = "standby_host_key_mismatch"
	codeStandbyJoin        = "standby_join_failed"
	codeStandbyPoweron     = "standby_poweron_failed"
	codeTakeInterrupted    = "standby_take_interrupted"
)

// standbyUserData is req's user-data with SSH access for prebake: a host
// key made for this standby and prebake's login key. It returns the label
// that pins the host key. The private host key is in the server's user_data
// and nowhere else; it never leaves the standby's first boot in a log.
func (p *Provider) standbyUserData(req providers.CreateRequest) ([]byte, string, error) {
	hostKey, access, err := newHostKey("prebake standby host key")
	if err != nil {
		return nil, "", fmt.Errorf("hcloud: standby %q: %w", req.Name, err)
	}
	access.AuthorizedKey = authorizedLine(p.standby.signer.PublicKey(), standbyLoginComment)
	ud, err := bootstrap.WithSSHAccess(req.UserData, access)
	if err != nil {
		return nil, "", fmt.Errorf("hcloud: standby %q (group %q): %w", req.Name, req.Group, err)
	}
	return ud, hostKeyLabel(hostKey), nil
}

// checkStandbyRequest refuses a standby this provider can't keep.
func (p *Provider) checkStandbyRequest(req providers.CreateRequest) error {
	switch {
	case p.standby == nil:
		return fmt.Errorf("hcloud: standby %q (group %q): %w", req.Name, req.Group, providers.StandbyUnsupported("hcloud"))
	case req.Standby != providers.StandbyStopped:
		return fmt.Errorf("hcloud: standby %q (group %q) %s: %w: Hetzner has no suspend; the hcloud provider parks standbys stopped only", req.Name, req.Group, req.Standby, providers.ErrStandbyUnsupported)
	}
	return nil
}

// standbyOf is a server's standby marker and phase from its labels and
// status alone: a powered-off standby is parked, one shutting down (a park
// under way) prepared, any other warming.
func standbyOf(s *hcloud.Server) providers.Standby {
	state := s.Labels[providers.LabelStandby]
	if state == "" {
		return providers.Standby{}
	}
	out := providers.Standby{State: providers.StandbyState(state), Phase: providers.StandbyWarming}
	switch s.Status {
	case hcloud.ServerStatusOff:
		out.Phase = providers.StandbyParked
	case hcloud.ServerStatusStopping:
		out.Phase = providers.StandbyPrepared
	}
	return out
}

// listed is in, the view of server s, with what only this process knows
// of standbys: what the probes read, and which takes are under way.
func (p *Provider) listed(s *hcloud.Server, in providers.Instance) providers.Instance {
	_, pinned := s.Labels[LabelStandbyHostKey]
	if in.Standby.Phase == providers.StandbyNone {
		if pinned && s.Status == hcloud.ServerStatusOff && !p.isResuming(s.ID) {
			// The marker went and the power never came: a take cut short.
			in.Error = &providers.InstanceError{Class: providers.ErrorOther, Code: codeTakeInterrupted,
				Message: fmt.Sprintf("server %s (%s) was a warm-pool standby whose take was cut short: its marker is gone, but it was never powered on to join; delete it", in.ProviderID, s.Name)}
		}
		return in
	}
	if s.Status == hcloud.ServerStatusStopping {
		// A park under way, not a server going away.
		in.State = providers.StateRunning
	}
	if !pinned {
		in.Error = &providers.InstanceError{Class: providers.ErrorOther, Code: codeStandbyNoHostKey,
			Message: fmt.Sprintf("standby %s (%s) has no label %s, so its host key can't be checked and it can't be resumed; it is replaced", in.ProviderID, s.Name, LabelStandbyHostKey)}
		return in
	}
	if in.Standby.Phase != providers.StandbyWarming {
		return in
	}
	p.standbyMu.Lock()
	pr := p.probes[s.ID]
	p.standbyMu.Unlock()
	switch pr.result {
	case bootstrap.StatusPrepared:
		in.Standby.Phase = providers.StandbyPrepared
	case "failed":
		in.Error = &providers.InstanceError{Class: providers.ErrorOther, Code: codeStandbyFailed,
			Message: fmt.Sprintf("standby %s (%s): its node script failed: %s (its %s)", in.ProviderID, s.Name, pr.errMsg, bootstrap.DefaultStatusPath)}
	}
	return in
}

func (p *Provider) isResuming(id int64) bool {
	p.standbyMu.Lock()
	defer p.standbyMu.Unlock()
	return p.resuming[id]
}

func (p *Provider) setResuming(id int64, on bool) {
	p.standbyMu.Lock()
	defer p.standbyMu.Unlock()
	if on {
		p.resuming[id] = true
	} else {
		delete(p.resuming, id)
	}
}

// probeStandbys reads the status file of every running standby that is
// still warming and was not probed within standbyProbeEvery, all at once
// (standbyProbeParallel at a time), each bounded by standbyProbeTimeout. A
// standby that can't be read yet stays warming. servers is all List knows:
// what the probes learned of a server that is gone is forgotten.
func (p *Provider) probeStandbys(ctx context.Context, servers []*hcloud.Server) {
	if p.standby == nil {
		return
	}
	now := p.now()
	var due []*hcloud.Server
	p.standbyMu.Lock()
	live := make(map[int64]bool, len(servers))
	for _, s := range servers {
		live[s.ID] = true
		pr := p.probes[s.ID]
		if s.Status != hcloud.ServerStatusRunning || s.Labels[providers.LabelStandby] == "" || s.Labels[LabelStandbyHostKey] == "" ||
			pr.result != "" || (!pr.at.IsZero() && now.Sub(pr.at) < standbyProbeEvery) {
			continue
		}
		pr.at = now
		p.probes[s.ID] = pr
		due = append(due, s)
	}
	maps.DeleteFunc(p.probes, func(id int64, _ standbyProbe) bool { return !live[id] })
	p.standbyMu.Unlock()

	sem := make(chan struct{}, standbyProbeParallel)
	var wg sync.WaitGroup
	for _, s := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, standbyProbeTimeout)
			defer cancel()
			st, err := p.probeStandby(pctx, s)
			if err != nil {
				p.log.Debug("hcloud: standby status not read; it stays warming", "instance", s.Name, "providerID", providerid.Format(s.ID), "err", err)
				return
			}
			if st.Result != bootstrap.StatusPrepared && st.Result != "failed" {
				return
			}
			p.standbyMu.Lock()
			if pr, ok := p.probes[s.ID]; ok {
				pr.result, pr.errMsg = st.Result, st.Error
				p.probes[s.ID] = pr
			}
			p.standbyMu.Unlock()
			p.log.Info("hcloud: standby status read", "group", s.Labels[providers.LabelGroup], "instance", s.Name, "providerID", providerid.Format(s.ID), "result", st.Result)
		})
	}
	wg.Wait()
}

// probeStandby logs in to standby s and reads its status file; the zero
// Status while it has written none.
func (p *Provider) probeStandby(ctx context.Context, s *hcloud.Server) (bootstrap.Status, error) {
	client, done, err := p.loginStandby(ctx, s)
	if err != nil {
		return bootstrap.Status{}, err
	}
	defer done()
	return standbyStatus(client)
}

// standbyStatus reads the status file over client; the zero Status while
// there is none.
func standbyStatus(client *ssh.Client) (bootstrap.Status, error) {
	stdout, stderr, err := sshRun(client, bootstrap.StandbyStatusCommand, nil)
	if err != nil {
		if stderr != nil {
			return bootstrap.Status{}, fmt.Errorf("`%s`: %w: %s", bootstrap.StandbyStatusCommand, err, tail(stderr.String()))
		}
		return bootstrap.Status{}, err
	}
	if strings.TrimSpace(stdout.String()) == "" {
		return bootstrap.Status{}, nil
	}
	return bootstrap.ParseStatus(stdout.Bytes())
}

// standbyAddress is the IP:22 prebake dials standby s at.
func (p *Provider) standbyAddress(s *hcloud.Server) (string, error) {
	if n := p.standby.network; n != 0 {
		for _, pn := range s.PrivateNet {
			if pn.Network != nil && pn.Network.ID == n && pn.IP != nil && !pn.IP.IsUnspecified() {
				return net.JoinHostPort(pn.IP.String(), "22"), nil
			}
		}
		return "", fmt.Errorf("server %d (%s) has no IP in network %d, where standbys are reached (standbySSHAddress: private)", s.ID, s.Name, n)
	}
	if ip := s.PublicNet.IPv4.IP; ip != nil && !ip.IsUnspecified() {
		return net.JoinHostPort(ip.String(), "22"), nil
	}
	return "", fmt.Errorf("server %d (%s) has no public IPv4, where standbys are reached (standbySSHAddress: public); use private with a network", s.ID, s.Name)
}

// loginStandby logs in to standby s as root, checking its host key against
// LabelStandbyHostKey before anything is sent.
func (p *Provider) loginStandby(ctx context.Context, s *hcloud.Server) (*ssh.Client, func(), error) {
	pin := s.Labels[LabelStandbyHostKey]
	if pin == "" {
		return nil, nil, fmt.Errorf("server %d (%s) has no label %s: its host key can't be checked", s.ID, s.Name, LabelStandbyHostKey)
	}
	addr, err := p.standbyAddress(s)
	if err != nil {
		return nil, nil, err
	}
	return p.sshLogin(ctx, addr, p.standby.signer, func(key ssh.PublicKey) error {
		if key.Type() != ssh.KeyAlgoED25519 || hostKeyLabel(key) != pin {
			return &standbyHostKeyMismatch{server: s.ID, got: key}
		}
		return nil
	})
}

// waitStandbySSH logs in to standby s, again while its sshd does not
// answer (it boots), for at most standbySSHWait. Another host key ends the
// wait at once: the standby's own was installed at its first boot.
func (p *Provider) waitStandbySSH(ctx context.Context, s *hcloud.Server) (*ssh.Client, func(), error) {
	began := time.Now()
	pause := p.poll
	for {
		// ctx, not a shorter one: the login outlives the wait.
		client, done, err := p.loginStandby(ctx, s)
		var mismatch *standbyHostKeyMismatch
		switch {
		case err == nil:
			return client, done, nil
		case errors.As(err, &mismatch):
			return nil, nil, &standbyError{code: codeStandbyHostKey, err: err}
		}
		unreachable := func() error {
			return &standbyError{code: codeStandbyUnreachable,
				err: fmt.Errorf("server %d (%s) did not answer on SSH in the %s after its power-on (at most %s; %w): prebake must reach port 22 of its standbys (providers.hcloud.firewalls, standbySSHAddress)",
					s.ID, s.Name, time.Since(began).Round(time.Millisecond), standbySSHWait, err)}
		}
		if time.Since(began) >= standbySSHWait {
			return nil, nil, unreachable()
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, unreachable()
		case <-t.C:
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// ownServer gets the server id names, checked as the cluster's, for verb.
func (p *Provider) ownServer(ctx context.Context, id, verb string) (*hcloud.Server, error) {
	n, err := providerid.Parse(id)
	if err != nil {
		return nil, err
	}
	s, resp, err := p.client.Server.GetByID(ctx, n)
	switch {
	case err != nil:
		return nil, fmt.Errorf("hcloud: %s %s: get the server: %w", verb, id, wrapStatus(err, resp))
	case s == nil:
		return nil, fmt.Errorf("hcloud: %s %s: server %d: %w", verb, id, n, providers.ErrNotFound)
	case s.Labels[providers.LabelCluster] != p.cluster:
		return nil, fmt.Errorf("hcloud: refusing to %s server %s (%q): it is not owned by cluster %q", verb, id, s.Name, p.cluster)
	}
	return s, nil
}

// dropLabel removes label key from server s (labels are replaced as a
// whole with PUT /servers/{id}) and returns the server as the API answered.
func (p *Provider) dropLabel(ctx context.Context, s *hcloud.Server, key string) (*hcloud.Server, error) {
	labels := maps.Clone(s.Labels)
	delete(labels, key)
	got, resp, err := p.client.Server.Update(ctx, s, hcloud.ServerUpdateOpts{Labels: labels})
	if err != nil {
		return nil, fmt.Errorf("remove the label %s of server %d: %w", key, s.ID, wrapStatus(err, resp))
	}
	p.recordChanged(got)
	return got, nil
}

// Park implements providers.Provider: the standby is powered off (an ACPI
// shutdown, then poweroff if it is not off within shutdownGrace or half the
// call's deadline, whichever is shorter). A powered-off standby is left as
// it is.
func (p *Provider) Park(ctx context.Context, id string, state providers.StandbyState) error {
	if p.standby == nil {
		return providers.StandbyUnsupported("hcloud")
	}
	if state != providers.StandbyStopped {
		return fmt.Errorf("hcloud: park %s %s: %w: Hetzner has no suspend; the hcloud provider parks standbys stopped only", id, state, providers.ErrStandbyUnsupported)
	}
	s, err := p.ownServer(ctx, id, "park")
	if err != nil {
		return err
	}
	if s.Labels[providers.LabelStandby] == "" {
		return fmt.Errorf("hcloud: park %s: it has no label %s: it is no standby (taken already?)", id, providers.LabelStandby)
	}
	if s.Status == hcloud.ServerStatusOff {
		return nil
	}
	grace := shutdownGrace
	if dl, ok := ctx.Deadline(); ok {
		// Leave time for the poweroff within the call.
		grace = min(grace, time.Until(dl)/2)
	}
	if err := p.stopServer(ctx, s.ID, grace, p.poll); err != nil {
		return fmt.Errorf("hcloud: park %s: %w", id, err)
	}
	if s, err = p.serverByID(ctx, s.ID); err == nil {
		p.recordChanged(s)
	}
	p.log.Info("standby parked", "group", s.Labels[providers.LabelGroup], "instance", s.Name, "providerID", id)
	return nil
}

// Resume implements providers.Provider, in this order: the standby marker
// goes (PUT /servers/{id}), the server is powered on, prebake logs in with
// the host key its label pins (waiting at most standbySSHWait), and the node
// script of userData (a cloud-config; never logged) is started there as
// the unit prebake-join.service; then the fingerprint label goes. Resume
// returns once the script has started: the join runs on the server, as it
// does after a create. A server that already runs a join (an earlier
// attempt got that far) gets no second one; one whose join failed is an
// error. A server with neither label is returned as it is.
func (p *Provider) Resume(ctx context.Context, id string, userData []byte) (providers.Instance, error) {
	if p.standby == nil {
		return providers.Instance{}, providers.StandbyUnsupported("hcloud")
	}
	s, err := p.ownServer(ctx, id, "resume")
	if err != nil {
		return providers.Instance{}, err
	}
	marker, pin := s.Labels[providers.LabelStandby], s.Labels[LabelStandbyHostKey]
	if marker == "" && pin == "" {
		// Taken, and its join started (an earlier Resume), or never a
		// standby.
		return instance(s), nil
	}
	if pin == "" {
		return providers.Instance{}, &standbyError{code: codeStandbyNoHostKey,
			err: fmt.Errorf("hcloud: resume %s: it has no label %s, so its host key can't be checked", id, LabelStandbyHostKey)}
	}
	// Before anything changes: user-data without a node script can't join.
	script, err := bootstrap.NodeScript(userData)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("hcloud: resume %s: %w", id, err)
	}
	p.setResuming(s.ID, true)
	defer p.setResuming(s.ID, false)
	log := p.log.With("group", s.Labels[providers.LabelGroup], "instance", s.Name, "providerID", id)
	// From here on every List shows a server that joins.
	if marker != "" {
		if s, err = p.dropLabel(ctx, s, providers.LabelStandby); err != nil {
			return providers.Instance{}, fmt.Errorf("hcloud: resume %s: %w", id, err)
		}
	}
	was := s.Status
	if s.Status != hcloud.ServerStatusRunning {
		if err := p.startServer(ctx, s.ID); err != nil {
			var ae hcloud.ActionError
			if errors.As(err, &ae) {
				err = &standbyError{code: codeStandbyPoweron, err: err}
			}
			return providers.Instance{}, fmt.Errorf("hcloud: resume %s: %w", id, err)
		}
		if s, err = p.serverByID(ctx, s.ID); err != nil {
			return providers.Instance{}, fmt.Errorf("hcloud: resume %s: %w", id, err)
		}
		p.recordChanged(s)
	}
	client, done, err := p.waitStandbySSH(ctx, s)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("hcloud: resume %s: %w", id, err)
	}
	defer done()
	st, err := standbyStatus(client)
	if err != nil {
		return providers.Instance{}, &standbyError{code: codeStandbyJoin, err: fmt.Errorf("hcloud: resume %s: read its status: %w", id, err)}
	}
	switch st.Result {
	case "running", "ok":
		// An earlier attempt started the join: it is not started twice.
		log.Info("standby's join runs already", "result", st.Result)
	case "failed":
		return providers.Instance{}, &standbyError{code: codeStandbyJoin,
			err: fmt.Errorf("hcloud: resume %s: the join an earlier attempt started failed: %s (its %s)", id, st.Error, bootstrap.DefaultStatusPath)}
	default:
		if _, stderr, err := sshRun(client, bootstrap.StandbyJoinCommand, script); err != nil {
			msg := ""
			if stderr != nil {
				msg = ": " + tail(stderr.String())
			}
			return providers.Instance{}, &standbyError{code: codeStandbyJoin,
				err: fmt.Errorf("hcloud: resume %s: start its node script: %w%s", id, err, msg)}
		}
	}
	if got, err := p.dropLabel(ctx, s, LabelStandbyHostKey); err != nil {
		// The join runs: a lingering label only makes a later power-off
		// of this node look like a take cut short.
		log.Warn("hcloud: the resumed standby keeps its host key label", "err", err)
	} else {
		s = got
	}
	log.Info("standby resumed", "was", was)
	out := instance(s)
	out.State, out.Standby, out.Error = providers.StateCreating, providers.Standby{}, nil
	return out, nil
}
