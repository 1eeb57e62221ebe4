package static

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/prebake-dev/prebake/providers/static/providerid"
)

// Defaults for the zero values of SSHOptions.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultCommandTimeout = 30 * time.Minute
)

// stderrTail is how much of a failed command's stderr an error carries:
// enough to see why, too little to carry a script.
const stderrTail = 512

// SSHOptions configures the SSH shell.
type SSHOptions struct {
	// PrivateKey is the client key, PEM or OpenSSH format, unencrypted.
	PrivateKey []byte
	// KnownHostsFile lists the machines' host keys (OpenSSH known_hosts
	// format; hashed names work). A machine on a port other than 22 is
	// written "[address]:port". There is no way to skip the check.
	KnownHostsFile string
	// ConnectTimeout bounds the TCP connect and the SSH handshake. Default
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// CommandTimeout bounds one whole script run. Default
	// DefaultCommandTimeout.
	CommandTimeout time.Duration
}

// SSHShell runs scripts over SSH with golang.org/x/crypto/ssh. It is safe
// for concurrent use; each Run opens its own connection.
type SSHShell struct {
	signer         ssh.Signer
	hostKeys       ssh.HostKeyCallback
	knownHosts     string
	connectTimeout time.Duration
	commandTimeout time.Duration
}

var _ Shell = (*SSHShell)(nil)

// NewSSHShell parses the key and the known_hosts file.
func NewSSHShell(o SSHOptions) (*SSHShell, error) {
	if len(o.PrivateKey) == 0 {
		return nil, errors.New("static: the SSH private key is empty")
	}
	signer, err := ssh.ParsePrivateKey(o.PrivateKey)
	if err != nil {
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, errors.New("static: the SSH private key is encrypted; give an unencrypted key (it is read from a file or variable you protect)")
		}
		return nil, fmt.Errorf("static: the SSH private key can't be parsed (want PEM or OpenSSH format): %w", err)
	}
	if o.KnownHostsFile == "" {
		return nil, errors.New("static: no known_hosts file: host keys are always checked; collect them with ssh-keyscan and name the file")
	}
	if _, err := os.Stat(o.KnownHostsFile); err != nil {
		return nil, fmt.Errorf("static: known_hosts file: %w", err)
	}
	hostKeys, err := knownhosts.New(o.KnownHostsFile)
	if err != nil {
		return nil, fmt.Errorf("static: known_hosts file %q: %w", o.KnownHostsFile, err)
	}
	s := &SSHShell{
		signer:         signer,
		hostKeys:       hostKeys,
		knownHosts:     o.KnownHostsFile,
		connectTimeout: o.ConnectTimeout,
		commandTimeout: o.CommandTimeout,
	}
	if s.connectTimeout <= 0 {
		s.connectTimeout = DefaultConnectTimeout
	}
	if s.commandTimeout <= 0 {
		s.commandTimeout = DefaultCommandTimeout
	}
	return s, nil
}

// HostKeyError: the machine's host key is not the one known_hosts lists
// (Mismatch), or known_hosts lists none for it.
type HostKeyError struct {
	Host, Addr, KnownHosts string
	Mismatch               bool
	Got                    string // fingerprint of the key the machine showed
}

func (e *HostKeyError) Error() string {
	if e.Mismatch {
		return fmt.Sprintf("machine %q (%s) showed host key %s, which does not match its entry in %s: refusing to connect; if the machine was reinstalled, replace its line (ssh-keyscan), else investigate", e.Host, e.Addr, e.Got, e.KnownHosts)
	}
	return fmt.Sprintf("machine %q (%s) is not in %s (its host key is %s): refusing to connect; add it with ssh-keyscan after checking the key", e.Host, e.Addr, e.KnownHosts, e.Got)
}

// DialError: the machine could not be reached or logged into.
type DialError struct {
	Host, Addr string
	Err        error
}

func (e *DialError) Error() string {
	return fmt.Sprintf("machine %q: ssh %s: %v", e.Host, e.Addr, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// CommandError: the script ran and failed.
type CommandError struct {
	Host   string
	Status int // exit status, -1 when none came back
	// Stderr is the tail of the script's standard error.
	Stderr string
}

// Error leaves the stderr out: the message reaches CA, whose Events and
// status ConfigMap any user of the cluster may read, and a node script's
// output can hold its join token. prebake logs the tail, redacted
// (RedactedStderr).
func (e *CommandError) Error() string {
	msg := fmt.Sprintf("machine %q: script exited with status %d", e.Host, e.Status)
	if e.Status < 0 {
		msg = fmt.Sprintf("machine %q: script ended without an exit status (killed by a signal or the connection dropped)", e.Host)
	}
	if e.Stderr != "" {
		msg += " (the end of its stderr is in prebake's log)"
	}
	return msg
}

// RedactedStderr is the stderr tail with anything that looks like a secret
// replaced: kubeadm bootstrap tokens, and the value after a word such as
// token, password, secret or key.
func (e *CommandError) RedactedStderr() string {
	s := bootstrapTokenRE.ReplaceAllString(e.Stderr, "<redacted>")
	return secretValueRE.ReplaceAllString(s, "${1}<redacted>")
}

var (
	// bootstrapTokenRE is a kubeadm bootstrap token, [a-z0-9]{6}.[a-z0-9]{16}.
	bootstrapTokenRE = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)
	// secretValueRE is a secret-sounding word, a separator, and the value.
	secretValueRE = regexp.MustCompile(`(?i)((?:token|password|passwd|secret|key)s?["']?(?:\s*[:=]\s*|\s+)["']?)[^\s"',;]+`)
)

// logStderr adds a failed command's redacted stderr tail to a log line.
func logStderr(err error) []any {
	var ce *CommandError
	if errors.As(err, &ce) && ce.Stderr != "" {
		return []any{"stderr", ce.RedactedStderr()}
	}
	return nil
}

// Run implements Shell: it connects to m, checks its host key, and runs
// `sh -s` (through `sudo -n` for a user other than root) with script on
// standard input and EnvProviderID, EnvHost and EnvNodeLabels in its
// environment, within
// the command timeout.
func (s *SSHShell) Run(ctx context.Context, m Machine, script []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.commandTimeout)
	defer cancel()
	client, err := s.dial(ctx, m)
	if err != nil {
		return err
	}
	defer client.Close()
	// Closing the connection is the only way to stop a remote command
	// when ctx ends.
	stop := context.AfterFunc(ctx, func() { client.Close() })
	defer stop()

	sess, err := client.NewSession()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("machine %q: %w", m.Host, ctx.Err())
		}
		return &DialError{Host: m.Host, Addr: addrOf(m), Err: fmt.Errorf("open session: %w", err)}
	}
	defer sess.Close()
	stderr := &tailBuffer{max: stderrTail}
	sess.Stdin = bytes.NewReader(script)
	sess.Stderr = stderr
	cmd := remoteCommand(m)
	err = sess.Run(cmd)
	if ctx.Err() != nil {
		return fmt.Errorf("machine %q: script did not finish within %s: %w", m.Host, s.commandTimeout, ctx.Err())
	}
	var exit *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit):
		return &CommandError{Host: m.Host, Status: exit.ExitStatus(), Stderr: stderr.String()}
	case errors.As(err, &missing):
		return &CommandError{Host: m.Host, Status: -1, Stderr: stderr.String()}
	}
	return &DialError{Host: m.Host, Addr: addrOf(m), Err: err}
}

// Environment of every script. The node script passes the providerID to
// the kubelet, so the Node matches the claim, and may add the machine's
// labels to the kubelet's --node-labels.
const (
	EnvProviderID = "PREBAKE_PROVIDER_ID" // static://<host>
	EnvHost       = "PREBAKE_HOST"        // <host>
	EnvNodeLabels = "PREBAKE_NODE_LABELS" // k1=v1,k2=v2 (sorted; empty when none)
)

// remoteCommand is what runs on m: sh reading the script from stdin, with
// the machine's identity in its environment. Host is a DNS-1123 subdomain
// and labels are valid Kubernetes labels (checked by New): none holds a
// character the shell would interpret, so nothing needs quoting.
func remoteCommand(m Machine) string {
	labels := make([]string, 0, len(m.Labels))
	for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
		labels = append(labels, k+"="+m.Labels[k])
	}
	cmd := fmt.Sprintf("env %s=%s %s=%s %s=%s sh -s", EnvProviderID, providerid.Format(m.Host), EnvHost, m.Host, EnvNodeLabels, strings.Join(labels, ","))
	if m.User != "root" {
		cmd = "sudo -n " + cmd
	}
	return cmd
}

func addrOf(m Machine) string {
	return net.JoinHostPort(m.dialAddress(), strconv.Itoa(m.Port))
}

// dial connects and authenticates, within the connect timeout.
func (s *SSHShell) dial(ctx context.Context, m Machine) (*ssh.Client, error) {
	addr := addrOf(m)
	dctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, &DialError{Host: m.Host, Addr: addr, Err: err}
	}
	deadline, _ := dctx.Deadline()
	_ = conn.SetDeadline(deadline)

	// The callback's own error is kept: the handshake error wraps it with
	// text of its own.
	var keyErr *HostKeyError
	cfg := &ssh.ClientConfig{
		User: m.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(s.signer)},
		HostKeyCallback: func(hostname string, remote net.Addr, key ssh.PublicKey) error {
			err := s.hostKeys(hostname, remote, key)
			var ke *knownhosts.KeyError
			if errors.As(err, &ke) {
				keyErr = &HostKeyError{Host: m.Host, Addr: addr, KnownHosts: s.knownHosts, Mismatch: len(ke.Want) > 0, Got: ssh.FingerprintSHA256(key)}
				return keyErr
			}
			return err
		},
		HostKeyAlgorithms: s.hostKeyAlgorithms(addr),
		Timeout:           s.connectTimeout,
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		if keyErr != nil {
			return nil, keyErr
		}
		if dctx.Err() != nil {
			err = fmt.Errorf("no SSH handshake within %s: %w", s.connectTimeout, dctx.Err())
		}
		return nil, &DialError{Host: m.Host, Addr: addr, Err: err}
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// hostKeyAlgorithms returns the algorithms of the keys known_hosts lists
// for addr, so the server is asked for a key we can check (it may hold
// several kinds). nil lets the library choose, and an unknown host then
// fails the check with a clear error.
func (s *SSHShell) hostKeyAlgorithms(addr string) []string {
	// Checking a key that can't match returns the known keys.
	err := s.hostKeys(addr, &net.TCPAddr{}, probeKey{})
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			algos = append(algos, a)
		}
	}
	for _, k := range ke.Want {
		switch t := k.Key.Type(); t {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512)
			add(ssh.KeyAlgoRSASHA256)
			add(ssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	return algos
}

// probeKey is a public key no known_hosts line holds.
type probeKey struct{}

func (probeKey) Type() string                        { return "prebake-probe" }
func (probeKey) Marshal() []byte                     { return []byte("prebake-probe") }
func (probeKey) Verify([]byte, *ssh.Signature) error { return errors.New("probe key verifies nothing") }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return strings.TrimSpace(string(t.b)) }
