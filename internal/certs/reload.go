package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Reloader serves a certificate, key and client CA from files and reloads
// them when a file's modification time or size changes. It checks at most
// once per CheckInterval, on a handshake, so no goroutine is needed.
type Reloader struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger
	// CheckInterval bounds how often the files are stat'ed.
	CheckInterval time.Duration

	// mu guards everything below.
	mu        sync.Mutex
	cert      *tls.Certificate
	clientCAs *x509.CertPool
	stamp     string
	checked   time.Time
}

// NewReloader loads the files once; an error names the file and the fix.
// caFile may be empty for server-only TLS.
func NewReloader(certFile, keyFile, caFile string, log *slog.Logger) (*Reloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key must be given together")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log, CheckInterval: time.Second}
	stamp, err := r.fileStamp()
	if err != nil {
		return nil, err
	}
	if err := r.load(stamp); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reloader) fileStamp() (string, error) {
	s := ""
	for _, f := range []string{r.certFile, r.keyFile, r.caFile} {
		if f == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("TLS file: %w", err)
		}
		s += fmt.Sprintf("%s:%d:%d;", f, fi.ModTime().UnixNano(), fi.Size())
	}
	return s, nil
}

func (r *Reloader) load(stamp string) error {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("load --tls-cert %s / --tls-key %s: %w", r.certFile, r.keyFile, err)
	}
	var pool *x509.CertPool
	if r.caFile != "" {
		pem, err := os.ReadFile(r.caFile)
		if err != nil {
			return fmt.Errorf("read --client-ca: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--client-ca %s holds no PEM certificate", r.caFile)
		}
	}
	r.mu.Lock()
	r.cert, r.clientCAs, r.stamp = &cert, pool, stamp
	r.mu.Unlock()
	return nil
}

// maybeReload reloads when the files changed since the last load.
func (r *Reloader) maybeReload() {
	r.mu.Lock()
	due := time.Since(r.checked) >= r.CheckInterval
	if due {
		r.checked = time.Now()
	}
	old := r.stamp
	r.mu.Unlock()
	if !due {
		return
	}
	stamp, err := r.fileStamp()
	if err != nil || stamp == old {
		return
	}
	if err := r.load(stamp); err != nil {
		r.log.Warn("TLS files changed but could not be loaded; keeping the previous certificate", "err", err)
		return
	}
	r.log.Info("reloaded TLS certificate", "cert", r.certFile)
}

// ServerConfig returns a tls.Config that picks up changed files on each
// handshake. With a client CA it requires and verifies client certificates.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			r.maybeReload()
			r.mu.Lock()
			defer r.mu.Unlock()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*r.cert},
				NextProtos:   []string{"h2"},
			}
			if r.clientCAs != nil {
				c.ClientCAs = r.clientCAs
				c.ClientAuth = tls.RequireAndVerifyClientCert
			}
			return c, nil
		},
	}
}
