package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Bundle names the files Generate writes.
type Bundle struct {
	CACert, CAKey         string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// Generate writes a CA, a server certificate for hosts (DNS names or IPs)
// and a client certificate into dir, for development and tests. Keys are
// written 0600. Production should use cert-manager or its own PKI.
func Generate(dir string, hosts []string, validFor time.Duration) (Bundle, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Bundle{}, err
	}
	b := Bundle{
		CACert: filepath.Join(dir, "ca.crt"), CAKey: filepath.Join(dir, "ca.key"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
	}
	now := time.Now().Add(-time.Minute)
	caKey, caDER, err := makeCert(&x509.Certificate{
		Subject: pkix.Name{CommonName: "prebake development CA"}, NotBefore: now, NotAfter: now.Add(validFor),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	if err != nil {
		return Bundle{}, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	server := &x509.Certificate{
		Subject: pkix.Name{CommonName: "prebake"}, NotBefore: now, NotAfter: now.Add(validFor),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else {
			server.DNSNames = append(server.DNSNames, h)
		}
	}
	srvKey, srvDER, err := makeCert(server, ca, caKey)
	if err != nil {
		return Bundle{}, err
	}
	cliKey, cliDER, err := makeCert(&x509.Certificate{
		Subject: pkix.Name{CommonName: "cluster-autoscaler"}, NotBefore: now, NotAfter: now.Add(validFor),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	if err != nil {
		return Bundle{}, err
	}
	for _, f := range []struct {
		path string
		der  []byte
		key  *ecdsa.PrivateKey
	}{{b.CACert, caDER, nil}, {b.CAKey, nil, caKey}, {b.ServerCert, srvDER, nil}, {b.ServerKey, nil, srvKey}, {b.ClientCert, cliDER, nil}, {b.ClientKey, nil, cliKey}} {
		if err := writePEM(f.path, f.der, f.key); err != nil {
			return Bundle{}, err
		}
	}
	return b, nil
}

func makeCert(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	return key, der, nil
}

func writePEM(path string, der []byte, key *ecdsa.PrivateKey) error {
	var block *pem.Block
	mode := os.FileMode(0o644)
	if key != nil {
		k, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		block, mode = &pem.Block{Type: "EC PRIVATE KEY", Bytes: k}, 0o600
	} else {
		block = &pem.Block{Type: "CERTIFICATE", Bytes: der}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(block), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
