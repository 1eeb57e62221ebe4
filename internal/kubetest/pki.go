package kubetest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki names the files of the cluster's certificate authority, the kube-apiserver serving
// certificate, the admin client certificate and the service-account key pair. All paths are
// absolute.
type pki struct {
	CACert, CAKey           string
	ServingCert, ServingKey string
	AdminCert, AdminKey     string
	SAPub, SAKey            string

	// PEM bytes embedded into the kubeconfig.
	caPEM, adminPEM, adminKeyPEM []byte
}

// servingSANs are the names a client may use to reach the apiserver: loopback from the host,
// and the in-cluster service names and ClusterIP (the first address of 10.96.0.0/16).
var (
	servingDNSNames = []string{
		"localhost",
		"kubernetes",
		"kubernetes.default",
		"kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local",
	}
	servingIPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 96, 0, 1)}
)

const certValidity = 7 * 24 * time.Hour

// generatePKI writes a fresh CA, serving certificate, admin client certificate
// (O=system:masters) and service-account key pair into dir. TLS keys are ECDSA P-256; the
// service-account key is RSA 2048, which every Kubernetes version accepts for signing tokens.
func generatePKI(dir string, extraIPs ...net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create PKI dir: %w", err)
	}
	p := &pki{
		CACert:      filepath.Join(dir, "ca.crt"),
		CAKey:       filepath.Join(dir, "ca.key"),
		ServingCert: filepath.Join(dir, "apiserver.crt"),
		ServingKey:  filepath.Join(dir, "apiserver.key"),
		AdminCert:   filepath.Join(dir, "admin.crt"),
		AdminKey:    filepath.Join(dir, "admin.key"),
		SAPub:       filepath.Join(dir, "sa.pub"),
		SAKey:       filepath.Join(dir, "sa.key"),
	}
	// Backdate a little so a clock that is slightly behind still accepts the certificates.
	notBefore := time.Now().Add(-time.Hour)
	notAfter := notBefore.Add(certValidity)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "prebake-e2e-ca"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	if p.caPEM, _, err = writeCertAndKey(p.CACert, p.CAKey, caDER, caKey); err != nil {
		return nil, err
	}

	leaf := func(certPath, keyPath string, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, fmt.Errorf("generate key for %s: %w", tmpl.Subject.CommonName, err)
		}
		tmpl.SerialNumber = serial()
		tmpl.NotBefore, tmpl.NotAfter = notBefore, notAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("sign certificate for %s: %w", tmpl.Subject.CommonName, err)
		}
		return writeCertAndKey(certPath, keyPath, der, key)
	}
	if _, _, err := leaf(p.ServingCert, p.ServingKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    servingDNSNames,
		IPAddresses: append(slices.Clone(servingIPs), extraIPs...),
	}); err != nil {
		return nil, err
	}
	if p.adminPEM, p.adminKeyPEM, err = leaf(p.AdminCert, p.AdminKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "prebake-e2e-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	if _, err := writePEM(p.SAKey, "PRIVATE KEY", mustPKCS8(saKey)); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("marshal service-account public key: %w", err)
	}
	if _, err := writePEM(p.SAPub, "PUBLIC KEY", pubDER); err != nil {
		return nil, err
	}
	return p, nil
}

// writeKubeconfig writes a self-contained kubeconfig (certificates embedded) that reaches
// server as the admin user.
func writeKubeconfig(path, server string, p *pki) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["prebake-e2e"] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: p.caPEM,
	}
	cfg.AuthInfos["prebake-e2e-admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: p.adminPEM,
		ClientKeyData:         p.adminKeyPEM,
	}
	cfg.Contexts["prebake-e2e"] = &clientcmdapi.Context{Cluster: "prebake-e2e", AuthInfo: "prebake-e2e-admin"}
	cfg.CurrentContext = "prebake-e2e"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on Linux; a panic here means the system is broken.
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return n
}

func mustPKCS8(key crypto.Signer) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		// Only unsupported key types fail, and we pass ECDSA and RSA keys.
		panic(fmt.Sprintf("marshal private key: %v", err))
	}
	return der
}

func writeCertAndKey(certPath, keyPath string, certDER []byte, key crypto.Signer) (certPEM, keyPEM []byte, err error) {
	if certPEM, err = writePEM(certPath, "CERTIFICATE", certDER); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = writePEM(keyPath, "PRIVATE KEY", mustPKCS8(key)); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

func writePEM(path, blockType string, der []byte) ([]byte, error) {
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return data, nil
}
