package hcloud

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
)

// A Hetzner server has no credential of the project's, so a builder cannot
// label itself. prebake gives each builder a host key and a login key of its
// own (in the user-data; cloud-init installs them), logs in as root and runs
// the seal step, whose stdout is the report. The host key is pinned from the
// first connection: prebake made it.
const (
	// builderSSHTimeout bounds the TCP connect and the handshake.
	builderSSHTimeout = 10 * time.Second
	// builderSealTimeout bounds one seal run (cleanup and report take
	// seconds).
	builderSealTimeout = 5 * time.Minute
	// builderHostKeyGrace is how long another host key is taken for an sshd
	// that answered before cloud-init installed the builder's (a socket-
	// activated sshd on a fresh image); after it, the builder is unusable.
	builderHostKeyGrace = 3 * time.Minute
	// builderOutputLimit caps what is kept of seal's stdout and stderr.
	builderOutputLimit = 1 << 20
)

// builderAccess is what prebake keeps of one builder's keys: the client key
// it logs in with and the host key the builder must show.
type builderAccess struct {
	signer  ssh.Signer
	hostKey ssh.PublicKey
	booted  time.Time
}

func (p *Provider) builderAccess(id string) (builderAccess, bool) {
	p.buildersMu.Lock()
	defer p.buildersMu.Unlock()
	a, ok := p.builders[id]
	return a, ok
}

// newBuilderAccess makes a builder's two ed25519 keys: what prebake keeps and
// what goes into the user-data.
func newBuilderAccess(now time.Time) (builderAccess, bootstrap.SSHAccess, error) {
	hostPub, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return builderAccess{}, bootstrap.SSHAccess{}, fmt.Errorf("make host key: %w", err)
	}
	_, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return builderAccess{}, bootstrap.SSHAccess{}, fmt.Errorf("make login key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(hostPriv, "prebake builder host key")
	if err != nil {
		return builderAccess{}, bootstrap.SSHAccess{}, fmt.Errorf("encode host key: %w", err)
	}
	hostKey, err := ssh.NewPublicKey(hostPub)
	if err != nil {
		return builderAccess{}, bootstrap.SSHAccess{}, err
	}
	signer, err := ssh.NewSignerFromKey(clientPriv)
	if err != nil {
		return builderAccess{}, bootstrap.SSHAccess{}, err
	}
	cfg := bootstrap.SSHAccess{
		HostKeyPrivate: string(pem.EncodeToMemory(block)),
		HostKeyPublic:  strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostKey))),
		AuthorizedKey:  strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " prebake-builder",
	}
	return builderAccess{signer: signer, hostKey: hostKey, booted: now}, cfg, nil
}

// hostKeyMismatch is a builder that showed another host key than its own.
type hostKeyMismatch struct{ want, got ssh.PublicKey }

func (e *hostKeyMismatch) Error() string {
	return fmt.Sprintf("host key %s, want the builder's own %s", ssh.FingerprintSHA256(e.got), ssh.FingerprintSHA256(e.want))
}

// BuilderReport implements imagecatalog.BuildAPI: it logs in to the builder
// as root over SSH and runs bootstrap.BuilderSealCommand. Until the builder
// runs and answers, and while seal says "not yet", ok is false; a refused or
// timed-out connection is returned as a plain error, which Build retries. It
// is unusable (imagecatalog.ErrBuilderUnusable) when this process did not
// boot it, when it still shows another host key after builderHostKeyGrace,
// and when seal fails.
func (p *Provider) BuilderReport(ctx context.Context, b imagecatalog.BuilderState) ([]byte, bool, error) {
	access, ok := p.builderAccess(b.ID)
	if !ok {
		return nil, false, fmt.Errorf("hcloud builder %s was not booted by this process, so it has no SSH key for it: %w (a new build replaces it)", b.ID, imagecatalog.ErrBuilderUnusable)
	}
	if b.Status != "running" {
		return nil, false, nil
	}
	if b.Address == "" {
		return nil, false, fmt.Errorf("hcloud builder %s has no public IPv4, and prebake reaches builders over SSH on it: let builders have one (%w)", b.ID, imagecatalog.ErrBuilderUnusable)
	}
	addr := net.JoinHostPort(b.Address, "22")
	ctx, cancel := context.WithTimeout(ctx, builderSealTimeout)
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, builderSSHTimeout)
	conn, err := p.builderDial(dctx, "tcp", addr)
	dcancel()
	if err != nil {
		// Normal while the builder boots; if it lasts, the path is closed.
		return nil, false, fmt.Errorf("hcloud builder %s: ssh %s: %w (if this lasts past boot: port 22 must be open to this host, also in providers.hcloud.firewalls)", b.ID, addr, err)
	}
	defer conn.Close()
	// Whatever ends first, ctx or the run, closes the connection.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(builderSSHTimeout))
	var mismatch *hostKeyMismatch
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User: "root",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(access.signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if !bytes.Equal(key.Marshal(), access.hostKey.Marshal()) {
				mismatch = &hostKeyMismatch{want: access.hostKey, got: key}
				return mismatch
			}
			return nil
		},
		HostKeyAlgorithms: []string{ssh.KeyAlgoED25519},
		Timeout:           builderSSHTimeout,
	})
	if err != nil {
		if mismatch != nil {
			if p.now().Sub(access.booted) > builderHostKeyGrace {
				return nil, false, fmt.Errorf("hcloud builder %s (%s) still shows %v %s after boot: someone else answers at its address, or cloud-init did not install the host key: %w",
					b.ID, addr, mismatch, builderHostKeyGrace, imagecatalog.ErrBuilderUnusable)
			}
			return nil, false, fmt.Errorf("hcloud builder %s (%s): %v (cloud-init has not installed it yet?); nothing was sent", b.ID, addr, mismatch)
		}
		return nil, false, fmt.Errorf("hcloud builder %s: ssh %s: %w", b.ID, addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	client := ssh.NewClient(cc, chans, reqs)
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return nil, false, fmt.Errorf("hcloud builder %s: ssh session: %w", b.ID, err)
	}
	defer sess.Close()
	stdout, stderr := &limitedBuffer{max: builderOutputLimit}, &limitedBuffer{max: builderOutputLimit}
	sess.Stdout, sess.Stderr = stdout, stderr
	err = sess.Run(bootstrap.BuilderSealCommand)
	var exit *ssh.ExitError
	switch {
	case err == nil:
		if stdout.truncated {
			return nil, false, fmt.Errorf("hcloud builder %s: the report is over %d bytes: %w", b.ID, builderOutputLimit, imagecatalog.ErrBuilderUnusable)
		}
		return stdout.Bytes(), true, nil
	case errors.As(err, &exit) && exit.ExitStatus() == bootstrap.SealNotYet:
		return nil, false, nil
	case errors.As(err, &exit):
		return nil, false, fmt.Errorf("hcloud builder %s: `%s` exited %d: %s: %w", b.ID, bootstrap.BuilderSealCommand, exit.ExitStatus(), tail(stderr.String()), imagecatalog.ErrBuilderUnusable)
	case ctx.Err() != nil:
		return nil, false, fmt.Errorf("hcloud builder %s: `%s`: %w", b.ID, bootstrap.BuilderSealCommand, ctx.Err())
	}
	return nil, false, fmt.Errorf("hcloud builder %s: `%s`: %w", b.ID, bootstrap.BuilderSealCommand, err)
}

// tail is the end of a command's stderr, enough to see why it failed.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 512 {
		s = "…" + s[len(s)-512:]
	}
	if s == "" {
		return "no output"
	}
	return s
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	max       int
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.truncated = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
