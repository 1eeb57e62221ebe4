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
	hostKey, cfg, err := newHostKey("prebake builder host key")
	if err != nil {
		return builderAccess{}, bootstrap.SSHAccess{}, err
	}
	_, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return builderAccess{}, bootstrap.SSHAccess{}, fmt.Errorf("make login key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(clientPriv)
	if err != nil {
		return builderAccess{}, bootstrap.SSHAccess{}, err
	}
	cfg.AuthorizedKey = authorizedLine(signer.PublicKey(), "prebake-builder")
	return builderAccess{signer: signer, hostKey: hostKey, booted: now}, cfg, nil
}

// newHostKey makes an ed25519 host key for one server: its public key, which
// prebake pins, and the SSHAccess that installs it (AuthorizedKey left for
// the caller).
func newHostKey(comment string) (ssh.PublicKey, bootstrap.SSHAccess, error) {
	hostPub, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, bootstrap.SSHAccess{}, fmt.Errorf("make host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(hostPriv, comment)
	if err != nil {
		return nil, bootstrap.SSHAccess{}, fmt.Errorf("encode host key: %w", err)
	}
	hostKey, err := ssh.NewPublicKey(hostPub)
	if err != nil {
		return nil, bootstrap.SSHAccess{}, err
	}
	return hostKey, bootstrap.SSHAccess{
		HostKeyPrivate: string(pem.EncodeToMemory(block)),
		HostKeyPublic:  authorizedLine(hostKey, ""),
	}, nil
}

// authorizedLine is key's authorized_keys line, with comment when not "".
func authorizedLine(key ssh.PublicKey, comment string) string {
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	if comment != "" {
		line += " " + comment
	}
	return line
}

// sshUnreachable is a connect to a server's SSH port that failed: normal
// while it boots.
type sshUnreachable struct {
	addr string
	err  error
}

func (e *sshUnreachable) Error() string { return fmt.Sprintf("ssh %s: %v", e.addr, e.err) }
func (e *sshUnreachable) Unwrap() error { return e.err }

// sshLogin connects to addr (IP:22) through builderDial and logs in as root
// with signer, within builderSSHTimeout for the connect and the handshake.
// check judges the host key the server shows: its error is returned as is,
// and then nothing was sent. A failed connect is an *sshUnreachable. The
// connection closes when ctx ends; done closes it sooner.
func (p *Provider) sshLogin(ctx context.Context, addr string, signer ssh.Signer, check func(ssh.PublicKey) error) (client *ssh.Client, done func(), err error) {
	dctx, dcancel := context.WithTimeout(ctx, builderSSHTimeout)
	conn, err := p.builderDial(dctx, "tcp", addr)
	dcancel()
	if err != nil {
		return nil, nil, &sshUnreachable{addr: addr, err: err}
	}
	// Whatever ends first, ctx or the caller, closes the connection.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(builderSSHTimeout))
	var keyErr error
	cc, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User: "root",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			keyErr = check(key)
			return keyErr
		},
		HostKeyAlgorithms: []string{ssh.KeyAlgoED25519},
		Timeout:           builderSSHTimeout,
	})
	if err != nil {
		stop()
		conn.Close()
		if keyErr != nil {
			return nil, nil, keyErr
		}
		return nil, nil, fmt.Errorf("ssh %s: %w", addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	client = ssh.NewClient(cc, chans, reqs)
	return client, func() { stop(); client.Close() }, nil
}

// sshRun runs command in a new session of client with stdin (nil for none)
// and returns its stdout and stderr, each cut at builderOutputLimit; err is
// an *ssh.ExitError when the command exited with a status other than 0.
func sshRun(client *ssh.Client, command string, stdin []byte) (stdout, stderr *limitedBuffer, err error) {
	sess, err := client.NewSession()
	if err != nil {
		return nil, nil, fmt.Errorf("ssh session: %w", err)
	}
	defer sess.Close()
	stdout, stderr = &limitedBuffer{max: builderOutputLimit}, &limitedBuffer{max: builderOutputLimit}
	sess.Stdout, sess.Stderr = stdout, stderr
	if stdin != nil {
		sess.Stdin = bytes.NewReader(stdin)
	}
	return stdout, stderr, sess.Run(command)
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
	client, done, err := p.sshLogin(ctx, addr, access.signer, func(key ssh.PublicKey) error {
		if !bytes.Equal(key.Marshal(), access.hostKey.Marshal()) {
			return &hostKeyMismatch{want: access.hostKey, got: key}
		}
		return nil
	})
	var unreachable *sshUnreachable
	var mismatch *hostKeyMismatch
	switch {
	case errors.As(err, &unreachable):
		// Normal while the builder boots; if it lasts, the path is closed.
		return nil, false, fmt.Errorf("hcloud builder %s: %w (if this lasts past boot: port 22 must be open to this host, also in providers.hcloud.firewalls)", b.ID, err)
	case errors.As(err, &mismatch):
		if p.now().Sub(access.booted) > builderHostKeyGrace {
			return nil, false, fmt.Errorf("hcloud builder %s (%s) still shows %v %s after boot: someone else answers at its address, or cloud-init did not install the host key: %w",
				b.ID, addr, mismatch, builderHostKeyGrace, imagecatalog.ErrBuilderUnusable)
		}
		return nil, false, fmt.Errorf("hcloud builder %s (%s): %v (cloud-init has not installed it yet?); nothing was sent", b.ID, addr, mismatch)
	case err != nil:
		return nil, false, fmt.Errorf("hcloud builder %s: %w", b.ID, err)
	}
	defer done()
	stdout, stderr, err := sshRun(client, bootstrap.BuilderSealCommand, nil)
	if stdout == nil {
		return nil, false, fmt.Errorf("hcloud builder %s: %w", b.ID, err)
	}
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
