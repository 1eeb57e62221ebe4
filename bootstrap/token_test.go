package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

func TestNewTokenFormat(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 200 {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if !tokenFormat.MatchString(tok.Value()) {
			t.Fatalf("token %q does not match %s", tok.Value(), tokenFormat)
		}
		if seen[tok.ID] {
			t.Fatalf("token id %s repeated", tok.ID)
		}
		seen[tok.ID] = true
	}
}

func TestTokenNeverPrintsSecret(t *testing.T) {
	t.Parallel()
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("made", "token", tok)
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%v %+v %s", tok, tok, tok), logged.String()} {
		if strings.Contains(s, tok.Secret) {
			t.Errorf("printed token holds the secret: %s", s)
		}
	}
}

func TestTokensCreate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cs := fake.NewClientset()
	ts := Tokens{Client: cs, TTL: 30 * time.Minute, Now: func() time.Time { return now }}
	tok, err := ts.Create(context.Background(), "prebake node pool-a-1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := cs.CoreV1().Secrets("kube-system").Get(context.Background(), "bootstrap-token-"+tok.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != "bootstrap.kubernetes.io/token" || s.Labels[ManagedByLabel] != ManagedByValue {
		t.Errorf("secret type %q labels %v", s.Type, s.Labels)
	}
	got := map[string]string{}
	for k, v := range s.Data {
		got[k] = string(v)
	}
	want := map[string]string{
		"description":                    "prebake node pool-a-1",
		"token-id":                       tok.ID,
		"token-secret":                   tok.Secret,
		"expiration":                     "2026-12-01T10:30:00Z",
		"usage-bootstrap-authentication": "true",
		"usage-bootstrap-signing":        "true",
		"auth-extra-groups":              "system:bootstrappers:kubeadm:default-node-token",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("token secret data (-want +got):\n%s", diff)
	}

	for _, ttl := range []time.Duration{2 * time.Hour, -time.Minute} {
		if _, err := (Tokens{Client: cs, TTL: ttl}).Create(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "TTL") {
			t.Errorf("TTL %s: err = %v, want a TTL error", ttl, err)
		}
	}
}

// TestTokensCleanupExpired deletes only expired tokens that carry prebake's label.
func TestTokensCleanupExpired(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	token := func(id, exp string, ours bool) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system", UID: types.UID("uid-" + id)},
			Type:       tokenSecretType,
			Data:       map[string][]byte{"token-id": []byte(id), "expiration": []byte(exp)},
		}
		if ours {
			s.Labels = map[string]string{ManagedByLabel: ManagedByValue}
		}
		return s
	}
	cs := fake.NewClientset(
		token("old001", "2026-12-01T09:00:00Z", true),  // expired, ours: deleted
		token("edge01", "2026-12-01T10:00:00Z", true),  // expires now: deleted
		token("new001", "2026-12-01T10:30:00Z", true),  // valid: kept
		token("kadm01", "2026-12-01T09:00:00Z", false), // expired, not ours: kept
	)
	ts := Tokens{Client: cs, Now: func() time.Time { return now }}
	n, err := ts.CleanupExpired(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("deleted %d, want 2", n)
	}
	list, err := cs.CoreV1().Secrets("kube-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, s := range list.Items {
		left = append(left, s.Name)
	}
	if diff := cmp.Diff([]string{"bootstrap-token-kadm01", "bootstrap-token-new001"}, left); diff != "" {
		t.Errorf("tokens left (-want +got):\n%s", diff)
	}
	// A second cleanup has nothing to do.
	if n, err := ts.CleanupExpired(context.Background()); n != 0 || err != nil {
		t.Errorf("second cleanup = %d, %v; want 0, nil", n, err)
	}
	if err := ts.Delete(context.Background(), "new001"); err != nil {
		t.Fatal(err)
	}
	if err := ts.Delete(context.Background(), "new001"); err != nil {
		t.Errorf("deleting a token already gone: %v", err)
	}
}
