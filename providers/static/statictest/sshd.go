package statictest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/prebake-dev/prebake/internal/tb"
)

// RequireSystem skips the test with one line when the machine can't run
// sshd in a network namespace, except under CI=true, where that fails it
// (docs/e2e.md, "Prerequisites"). It returns the sshd path.
func RequireSystem(t tb.TB) string {
	t.Helper()
	missing := ""
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		sshd, err = "/usr/sbin/sshd", nil
		if _, serr := os.Stat(sshd); serr != nil {
			err = serr
		}
	}
	switch {
	case os.Geteuid() != 0:
		missing = "root (for network namespaces)"
	case err != nil:
		missing = "sshd (apt-get install openssh-server)"
	default:
		if _, err := exec.LookPath("ip"); err != nil {
			missing = "ip (apt-get install iproute2)"
		}
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("system test needs %s, and CI=true makes a missing prerequisite a failure", missing)
		}
		t.Skipf("skipping system test: needs %s", missing)
	}
	return sshd
}

// Machine is one sshd "machine" of a Pool.
type Machine struct {
	Host    string // m1, m2, …
	Address string // the namespace's address
	Port    int
	HostKey ssh.PublicKey
}

// Pool is a set of "machines": sshd instances on several ports of one
// address inside a network namespace the test made, reached over a veth
// pair. Scripts run as root on this machine's filesystem; each sshd sets
// PREBAKE_TEST_HOST in its sessions, so a script knows which machine it is.
// Everything is torn down at the test's cleanup.
type Pool struct {
	// Dir holds the keys, configs and logs, and the scripts' markers.
	Dir      string
	Addr     string // the namespace's address
	Machines []Machine
	// ClientKey is the PEM private key every machine authorizes for root.
	ClientKey []byte
	// KnownHosts is a known_hosts file with every machine's host key.
	KnownHosts string
}

func run(t tb.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// runCleanup runs a command at cleanup and reports, not fails, an error.
func runCleanup(t tb.TB, name string, args ...string) {
	t.Cleanup(func() {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Logf("cleanup: %s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
	})
}

func randomHex(t tb.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// freeSubnet picks a 10.x.y.0/30 that no interface on this machine uses.
func freeSubnet(t tb.TB) (hostAddr, nsAddr string) {
	t.Helper()
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		t.Fatalf("ip addr show: %v", err)
	}
	for range 100 {
		x, _ := rand.Int(rand.Reader, big.NewInt(190))
		y, _ := rand.Int(rand.Reader, big.NewInt(256))
		prefix := fmt.Sprintf("10.%d.%d.", 64+x.Int64(), y.Int64())
		if !strings.Contains(string(out), " "+prefix) {
			return prefix + "1", prefix + "2"
		}
	}
	t.Fatal("no free 10.x.y.0/30 found")
	return "", ""
}

// NewPool starts n sshd "machines" named m1 … mn. It skips the test with
// one line when the machine lacks root, sshd or ip, and fails it then under
// CI=true.
func NewPool(t tb.TB, n int) *Pool {
	t.Helper()
	sshd := RequireSystem(t)
	id := randomHex(t, 3)
	ns, vethHost, vethNS := "pbst-"+id, "pbh"+id, "pbn"+id
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ip netns add: %v: %s", err, out)
		}
		t.Skipf("skipping system test: can't create a network namespace: %s", strings.TrimSpace(string(out)))
	}
	runCleanup(t, "ip", "netns", "del", ns)
	hostAddr, nsAddr := freeSubnet(t)
	run(t, "ip", "link", "add", vethHost, "type", "veth", "peer", "name", vethNS)
	runCleanup(t, "ip", "link", "del", vethHost) // takes its peer along
	run(t, "ip", "link", "set", vethNS, "netns", ns)
	run(t, "ip", "addr", "add", hostAddr+"/30", "dev", vethHost)
	run(t, "ip", "link", "set", vethHost, "up")
	run(t, "ip", "-n", ns, "addr", "add", nsAddr+"/30", "dev", vethNS)
	run(t, "ip", "-n", ns, "link", "set", vethNS, "up")
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	// sshd's privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	p := &Pool{Dir: dir, Addr: nsAddr}
	clientPub, clientPEM := NewKey(t)
	p.ClientKey = clientPEM
	authorized := filepath.Join(dir, "authorized_keys")
	WriteFile(t, authorized, ssh.MarshalAuthorizedKey(clientPub), 0o600)

	var known strings.Builder
	for i := range n {
		host := fmt.Sprintf("m%d", i+1)
		port := 2201 + i
		mdir := filepath.Join(dir, host)
		if err := os.Mkdir(mdir, 0o700); err != nil {
			t.Fatal(err)
		}
		hostPub, hostPEM := NewKey(t)
		WriteFile(t, filepath.Join(mdir, "host_key"), hostPEM, 0o600)
		cfg := strings.Join([]string{
			"Port " + strconv.Itoa(port),
			"ListenAddress " + nsAddr,
			"HostKey " + filepath.Join(mdir, "host_key"),
			"AuthorizedKeysFile " + authorized,
			"PermitRootLogin prohibit-password",
			"PasswordAuthentication no",
			"KbdInteractiveAuthentication no",
			"UsePAM no",
			"StrictModes no",
			"PidFile " + filepath.Join(mdir, "sshd.pid"),
			"SetEnv PREBAKE_TEST_HOST=" + host,
			"LogLevel ERROR",
			"",
		}, "\n")
		cfgPath := filepath.Join(mdir, "sshd_config")
		WriteFile(t, cfgPath, []byte(cfg), 0o600)
		logf, err := os.Create(filepath.Join(mdir, "sshd.log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", ns, sshd, "-D", "-e", "-f", cfgPath)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("start sshd: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logf.Close()
		})
		addr := net.JoinHostPort(nsAddr, strconv.Itoa(port))
		waitListening(t, addr, filepath.Join(mdir, "sshd.log"))
		p.Machines = append(p.Machines, Machine{Host: host, Address: nsAddr, Port: port, HostKey: hostPub})
		known.WriteString(knownhosts.Line([]string{addr}, hostPub) + "\n")
	}
	p.KnownHosts = filepath.Join(dir, "known_hosts")
	WriteFile(t, p.KnownHosts, []byte(known.String()), 0o600)
	return p
}

// waitListening polls until sshd accepts connections on addr.
func waitListening(t tb.TB, addr, logPath string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("sshd on %s did not listen within 15s: %v\nsshd log:\n%s", addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NewKey returns an ed25519 public key and its private key in OpenSSH PEM.
func NewKey(t tb.TB) (ssh.PublicKey, []byte) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return sshPub, pem.EncodeToMemory(block)
}

func WriteFile(t tb.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// MarkerScript returns a script that appends the machine's name to <dir>/<host>.<what>, so the
// test sees which machine ran it. It fails unless it runs inside the
// namespace and the provider told it its own providerID.
func (p *Pool) MarkerScript(what string) []byte {
	return fmt.Appendf(nil, `#!/bin/sh
set -eu
ip -o -4 addr show | grep -q ' %[1]s/' || { echo "not in the test namespace" >&2; exit 3; }
[ "$PREBAKE_PROVIDER_ID" = "static://$PREBAKE_TEST_HOST" ] || { echo "PREBAKE_PROVIDER_ID is $PREBAKE_PROVIDER_ID" >&2; exit 4; }
echo "$PREBAKE_TEST_HOST" >> %[2]q/"$PREBAKE_TEST_HOST".%[3]s
`, p.Addr, p.Dir, what)
}

// Markers returns the lines of <dir>/<host>.<what>, nil when absent.
func (p *Pool) Markers(t tb.TB, host, what string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.Dir, host+"."+what))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}
