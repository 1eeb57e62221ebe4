//go:build e2e

package bootstrap_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/internal/kubetest"
)

// TestTokensAgainstAPIServer creates a join token in the hermetic cluster's real
// kube-apiserver, has kubeadm (built from k8s.io/kubernetes) list it, and lets
// CleanupExpired delete it once expired while a token prebake did not make stays.
func TestTokensAgainstAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	b, cs := kubetest.StartTest(ctx, t)

	ts := bootstrap.Tokens{Client: cs, TTL: 20 * time.Minute}
	tok, err := ts.Create(ctx, "prebake e2e node")
	if err != nil {
		t.Fatal(err)
	}
	// Someone else's token (kubeadm's, say): expired, not labelled.
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-zzzzzz", Namespace: "kube-system"},
		Type:       "bootstrap.kubernetes.io/token",
		Data: map[string][]byte{"token-id": []byte("zzzzzz"), "token-secret": []byte("0123456789abcdef"),
			"expiration": []byte(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)), "usage-bootstrap-authentication": []byte("true")},
	}
	if _, err := cs.CoreV1().Secrets("kube-system").Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// kubeadm reads bootstrap tokens the way the apiserver's authenticator does.
	bins, err := kubetest.BuildNodeBinaries(ctx, kubetest.BuildOptions{Out: kubetest.TestLog{T: t}})
	if err != nil {
		t.Fatalf("build kubeadm: %v", err)
	}
	{
		out, err := exec.CommandContext(ctx, bins.Kubeadm, "token", "list", "--kubeconfig", b.Kubeconfig()).CombinedOutput()
		if err != nil {
			t.Fatalf("kubeadm token list: %v\n%s", err, out)
		}
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, tok.ID+".") {
				line = l
			}
		}
		for _, want := range []string{"authentication,signing", "prebake e2e node", bootstrap.NodeJoinGroup} {
			if !strings.Contains(line, want) {
				t.Errorf("kubeadm token list line for %s lacks %q:\n%s", tok.ID, want, out)
			}
		}
	}

	if n, err := ts.CleanupExpired(ctx); err != nil || n != 0 {
		t.Fatalf("cleanup before expiry = %d, %v; want 0, nil", n, err)
	}
	later := bootstrap.Tokens{Client: cs, Now: func() time.Time { return time.Now().Add(21 * time.Minute) }}
	if n, err := later.CleanupExpired(ctx); err != nil || n != 1 {
		t.Fatalf("cleanup after expiry = %d, %v; want 1, nil", n, err)
	}
	list, err := cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Items {
		if strings.HasPrefix(s.Name, "bootstrap-token-") {
			names = append(names, s.Name)
		}
	}
	if len(names) != 1 || names[0] != "bootstrap-token-zzzzzz" {
		t.Errorf("bootstrap tokens left = %q, want only the foreign one", names)
	}
}
