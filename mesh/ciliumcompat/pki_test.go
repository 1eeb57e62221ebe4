package ciliumcompat

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The certificates below are issued the way the Cilium v1.20.2 chart's certgen issues
// them (install/kubernetes/cilium/templates/clustermesh-apiserver/_helpers.tpl): all
// signed by the cluster's cilium-ca; the clustermesh-apiserver server certificate has
// CN clustermesh-apiserver.<ns>.svc, DNS names that and *.mesh.cilium.io, IPs 127.0.0.1
// and ::1; the client certificates are admin-<cluster>, local-<cluster> and, with
// clustermesh.apiserver.tls.authMode=cluster, remote-<cluster>. prebake issues no
// certificate: its cilium backend relies on one CA shared by all clusters.

type ca struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newCA(t *testing.T, cn string) *ca {
	t.Helper()
	key := genKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ca{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func genKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// keyPair is a certificate Secret's data: tls.crt, tls.key and ca.crt.
type keyPair struct {
	crt, key, ca []byte
}

func (c *ca) issue(t *testing.T, cn string, server bool) keyPair {
	t.Helper()
	key := genKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = []string{cn, "*.mesh.cilium.io"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{
		crt: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
		ca:  c.certPEM,
	}
}

// write puts the pair into dir as <prefix>.crt, <prefix>.key and <prefix>-ca.crt and
// returns the three paths.
func (k keyPair) write(t *testing.T, dir, prefix string) (crt, key, caFile string) {
	t.Helper()
	crt, key, caFile = filepath.Join(dir, prefix+".crt"), filepath.Join(dir, prefix+".key"), filepath.Join(dir, prefix+"-ca.crt")
	for p, b := range map[string][]byte{crt: k.crt, key: k.key, caFile: k.ca} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return crt, key, caFile
}
