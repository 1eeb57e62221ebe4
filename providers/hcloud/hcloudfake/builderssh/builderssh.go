// Package builderssh plays, for tests, what cloud-init and sshd do on a Hetzner server that
// prebake logs in to, an image builder or a warm-pool standby: it reads the host key and the
// authorized key from the user-data hcloudfake received and serves SSH with them on loopback,
// one listener per server. Dial is hcloud.Options' BuilderDial: it maps a fake server's public
// or private address (never dialled) to its listener. What a command does is the test's Exec
// or Shell: it stands in for the server's shell. Standby plays a standby's.
package builderssh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"

	"github.com/prebake-dev/prebake/providers/hcloud/hcloudfake"
)

// Exec runs one command on a builder and returns its exit status.
type Exec func(server hcloudfake.Server, command string, stdout, stderr io.Writer) int

// Shell is Exec with the command's standard input: what the client sent before it closed
// its side.
type Shell func(server hcloudfake.Server, command string, stdin io.Reader, stdout, stderr io.Writer) int

// Sshd serves every server of one fake.
type Sshd struct {
	fake  *hcloudfake.Fake
	shell Shell

	// mu guards servers, wrongHostKey, logins, ready and closed.
	mu           sync.Mutex
	servers      map[int64]*server
	wrongHostKey int
	logins       int
	ready        func(hcloudfake.Server) bool
	closed       bool
	wg           sync.WaitGroup
}

type server struct {
	ln  net.Listener
	cfg *ssh.ServerConfig
}

// New returns an Sshd for fake's builders; Close stops it.
func New(fake *hcloudfake.Fake, exec Exec) *Sshd {
	return NewShell(fake, func(s hcloudfake.Server, command string, _ io.Reader, stdout, stderr io.Writer) int {
		return exec(s, command, stdout, stderr)
	})
}

// NewShell returns an Sshd for fake's servers whose commands read their stdin; Close stops it.
func NewShell(fake *hcloudfake.Fake, shell Shell) *Sshd {
	return &Sshd{fake: fake, shell: shell, servers: map[int64]*server{}}
}

// SetReady makes a running server refuse connections until ready says yes: until its
// cloud-init wrote the files and installed the keys, as sshd on a real builder would not
// answer with the builder's key before then.
func (d *Sshd) SetReady(ready func(hcloudfake.Server) bool) {
	d.mu.Lock()
	d.ready = ready
	d.mu.Unlock()
}

// ShowWrongHostKey makes the next n connections show a host key of their own instead of the
// builder's (an sshd that answered before cloud-init installed the key).
func (d *Sshd) ShowWrongHostKey(n int) {
	d.mu.Lock()
	d.wrongHostKey = n
	d.mu.Unlock()
}

// Logins is how many times a client logged in, to any server.
func (d *Sshd) Logins() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logins
}

// Dial connects to the server at addr ("IP:22", its public or a private address). Like a
// real server, one that is not running refuses, and so does one whose user-data gave no SSH
// access.
func (d *Sshd) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "22" {
		return nil, fmt.Errorf("builderssh: dial %s: want IP:22", addr)
	}
	var srv *hcloudfake.Server
	for _, s := range d.fake.Servers() {
		if s.IPv4 == host || slices.Contains(s.PrivateIPs, host) {
			srv = &s
		}
	}
	if srv == nil {
		return nil, fmt.Errorf("builderssh: dial %s: no fake server has this address", addr)
	}
	d.mu.Lock()
	ready := d.ready
	d.mu.Unlock()
	if srv.Status != "running" || ready != nil && !ready(*srv) {
		return nil, fmt.Errorf("builderssh: dial %s: connection refused (server %d is %s, its sshd not up)", addr, srv.ID, srv.Status)
	}
	s, err := d.listen(*srv)
	if err != nil {
		return nil, err
	}
	var dl net.Dialer
	return dl.DialContext(ctx, network, s.ln.Addr().String())
}

func (d *Sshd) listen(srv hcloudfake.Server) (*server, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("builderssh: closed")
	}
	if s, ok := d.servers[srv.ID]; ok {
		return s, nil
	}
	cfg, err := serverConfig(srv.UserData)
	if err != nil {
		return nil, fmt.Errorf("builderssh: server %d: %w", srv.ID, err)
	}
	authorized, err := authorizedKey(srv.UserData)
	if err != nil {
		return nil, fmt.Errorf("builderssh: server %d: %w", srv.ID, err)
	}
	cfg.PublicKeyCallback = func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if meta.User() != "root" || !bytes.Equal(key.Marshal(), authorized.Marshal()) {
			return nil, fmt.Errorf("user %s with key %s: not authorized", meta.User(), ssh.FingerprintSHA256(key))
		}
		d.mu.Lock()
		d.logins++
		d.mu.Unlock()
		return nil, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{ln: ln, cfg: cfg}
	d.servers[srv.ID] = s
	d.wg.Add(1)
	go d.serve(srv.ID, s)
	return s, nil
}

func (d *Sshd) serve(id int64, s *server) {
	defer d.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer c.Close()
			cfg := s.cfg
			d.mu.Lock()
			if d.wrongHostKey > 0 {
				d.wrongHostKey--
				cfg = otherHostKey(s.cfg)
			}
			d.mu.Unlock()
			d.handle(id, c, cfg)
		}()
	}
}

func (d *Sshd) handle(id int64, c net.Conn, cfg *ssh.ServerConfig) {
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	// One session after another, or several at once, as sshd serves them.
	var sessions sync.WaitGroup
	defer sessions.Wait()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		sessions.Go(func() { d.session(id, ch, creqs) })
	}
}

// session runs the first exec request of one session; every other request
// is refused.
func (d *Sshd) session(id int64, ch ssh.Channel, creqs <-chan *ssh.Request) {
	ran := false
	for r := range creqs {
		if r.Type != "exec" || ran {
			_ = r.Reply(false, nil)
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(r.Payload, &payload); err != nil {
			_ = r.Reply(false, nil)
			continue
		}
		ran = true
		_ = r.Reply(true, nil)
		var srv hcloudfake.Server
		for _, s := range d.fake.Servers() {
			if s.ID == id {
				srv = s
			}
		}
		code := d.shell(srv, payload.Command, ch, ch, ch.Stderr())
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
		_ = ch.Close()
	}
}

// Close stops every listener and waits for the connections to end.
func (d *Sshd) Close() {
	d.mu.Lock()
	d.closed = true
	for _, s := range d.servers {
		s.ln.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// cloudConfig is the part of the user-data cloud-init's ssh module reads.
type cloudConfig struct {
	SSHKeys    map[string]string `yaml:"ssh_keys"`
	Authorized []string          `yaml:"ssh_authorized_keys"`
}

func parse(userData string) (cloudConfig, error) {
	var cc cloudConfig
	body, ok := bytes.CutPrefix([]byte(userData), []byte("#cloud-config\n"))
	if !ok {
		return cc, errors.New("user-data is no #cloud-config")
	}
	err := yaml.Unmarshal(body, &cc)
	return cc, err
}

func serverConfig(userData string) (*ssh.ServerConfig, error) {
	cc, err := parse(userData)
	if err != nil {
		return nil, err
	}
	priv := cc.SSHKeys["ed25519_private"]
	if priv == "" {
		return nil, errors.New("user-data has no ssh_keys.ed25519_private: cloud-init would make a host key nobody can check")
	}
	signer, err := ssh.ParsePrivateKey([]byte(priv))
	if err != nil {
		return nil, fmt.Errorf("ssh_keys.ed25519_private: %w", err)
	}
	cfg := &ssh.ServerConfig{}
	cfg.AddHostKey(signer)
	return cfg, nil
}

func authorizedKey(userData string) (ssh.PublicKey, error) {
	cc, err := parse(userData)
	if err != nil {
		return nil, err
	}
	if len(cc.Authorized) != 1 {
		return nil, fmt.Errorf("user-data has %d ssh_authorized_keys, want prebake's one", len(cc.Authorized))
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(cc.Authorized[0]))
	return key, err
}

// otherHostKey is cfg with a fresh host key, as an sshd that made its own would show.
func otherHostKey(cfg *ssh.ServerConfig) *ssh.ServerConfig {
	other := &ssh.ServerConfig{PublicKeyCallback: cfg.PublicKeyCallback}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err) // the system's randomness failed
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		panic(err)
	}
	other.AddHostKey(signer)
	return other
}

// SealCommand is the command prebake runs on a builder (bootstrap.BuilderSealCommand; a test
// in providers/hcloud keeps the two equal, as this package does not import bootstrap).
const SealCommand = "sh /var/lib/prebake/builder.sh seal"

// Sealer plays a builder's seal step: "not yet" (exit 75) notYet times per server, then the
// report that report makes of the server (its user-data says what was asked for). Any other
// command is not found.
func Sealer(notYet int, report func(hcloudfake.Server) ([]byte, error)) Exec {
	var mu sync.Mutex // guards asked
	asked := map[int64]int{}
	return func(s hcloudfake.Server, command string, stdout, stderr io.Writer) int {
		if command != SealCommand {
			fmt.Fprintf(stderr, "sh: %s: not found\n", command)
			return 127
		}
		mu.Lock()
		asked[s.ID]++
		n := asked[s.ID]
		mu.Unlock()
		if n <= notYet {
			fmt.Fprintln(stderr, "prebake-builder: not yet: the install step has no result (running)")
			return 75
		}
		data, err := report(s)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		_, _ = stdout.Write(data)
		return 0
	}
}
