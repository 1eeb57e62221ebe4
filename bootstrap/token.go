package bootstrap

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// The bootstrap token format and Secret keys, as kubeadm and the kube-apiserver's bootstrap
// token authenticator define them (k8s.io/cluster-bootstrap).
const (
	tokenSecretPrefix = "bootstrap-token-"
	tokenSecretType   = corev1.SecretType("bootstrap.kubernetes.io/token")
	// NodeJoinGroup is the group kubeadm's RBAC lets create node CSRs and read cluster-info.
	NodeJoinGroup = "system:bootstrappers:kubeadm:default-node-token"
	// ManagedByLabel marks the token Secrets prebake made; cleanup touches no other.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "prebake"
	// NodeLabel names the node a token Secret was made for (CreateForNode), so the token can be
	// found and revoked by label (DeleteForNode) once that node is gone.
	NodeLabel = "prebake.dev/node"
	// MaxTokenTTL is the longest a join token lives. A node that has not joined by then has
	// failed; a new scale-up gets a new token.
	MaxTokenTTL = time.Hour
)

var tokenFormat = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// Token is a kubeadm bootstrap token. Its String and LogValue hide the secret half.
type Token struct {
	ID, Secret string
	Expires    time.Time
}

// Value is "<id>.<secret>", what kubeadm join takes and Input.JoinToken wants.
func (t Token) Value() string { return t.ID + "." + t.Secret }

func (t Token) String() string { return t.ID + ".<redacted>" }

// LogValue makes slog print only the id.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

const tokenAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewToken returns a random token: 6 + 16 characters from [a-z0-9], as kubeadm makes them.
func NewToken() (Token, error) {
	id, err := randomString(6)
	if err != nil {
		return Token{}, err
	}
	secret, err := randomString(16)
	if err != nil {
		return Token{}, err
	}
	return Token{ID: id, Secret: secret}, nil
}

func randomString(n int) (string, error) {
	// Rejection sampling keeps every character equally likely: 252 = 7×36.
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("bootstrap: read random bytes for a token: %w", err)
		}
		for _, b := range buf {
			if b < 252 && len(out) < n {
				out = append(out, tokenAlphabet[int(b)%len(tokenAlphabet)])
			}
		}
	}
	return string(out), nil
}

// Tokens creates and cleans up join tokens in one cluster.
type Tokens struct {
	Client kubernetes.Interface
	// TTL is how long a token is valid; 0 means MaxTokenTTL. More than MaxTokenTTL is an error.
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (ts Tokens) now() time.Time {
	if ts.Now != nil {
		return ts.Now()
	}
	return time.Now()
}

// Create makes a fresh join token Secret in kube-system for one node: valid for TTL,
// usable to authenticate as a joining node (usage-bootstrap-authentication) and to verify
// the cluster-info ConfigMap's signature (usage-bootstrap-signing), which kubeadm join's
// token discovery needs. description says what it is for (e.g. the node name); it is not
// secret.
func (ts Tokens) Create(ctx context.Context, description string) (Token, error) {
	return ts.create(ctx, description, nil)
}

// CreateForNode is Create for the node named node, labelled NodeLabel=node so DeleteForNode
// finds it. A node name that is no valid label value (longer than 63 characters) gets no
// label: its token then only expires.
func (ts Tokens) CreateForNode(ctx context.Context, node string) (Token, error) {
	var labels map[string]string
	if len(validation.IsValidLabelValue(node)) == 0 {
		labels = map[string]string{NodeLabel: node}
	}
	return ts.create(ctx, "prebake node "+node, labels)
}

func (ts Tokens) create(ctx context.Context, description string, labels map[string]string) (Token, error) {
	ttl := ts.TTL
	if ttl == 0 {
		ttl = MaxTokenTTL
	}
	if ttl < 0 || ttl > MaxTokenTTL {
		return Token{}, fmt.Errorf("bootstrap: join token TTL %s: want at most %s", ttl, MaxTokenTTL)
	}
	tok, err := NewToken()
	if err != nil {
		return Token{}, err
	}
	tok.Expires = ts.now().Add(ttl).UTC().Truncate(time.Second)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      tokenSecretPrefix + tok.ID,
			Namespace: metav1.NamespaceSystem,
			Labels:    withManagedBy(labels),
		},
		Type: tokenSecretType,
		Data: map[string][]byte{
			"description":                    []byte(description),
			"token-id":                       []byte(tok.ID),
			"token-secret":                   []byte(tok.Secret),
			"expiration":                     []byte(tok.Expires.Format(time.RFC3339)),
			"usage-bootstrap-authentication": []byte("true"),
			"usage-bootstrap-signing":        []byte("true"),
			"auth-extra-groups":              []byte(NodeJoinGroup),
		},
	}
	if _, err := ts.Client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return Token{}, fmt.Errorf("bootstrap: create join token Secret kube-system/%s%s (needs RBAC create on secrets in kube-system): %w",
			tokenSecretPrefix, tok.ID, err)
	}
	return tok, nil
}

// Delete removes the token with this id, once its node has joined. A token already gone is
// not an error.
func (ts Tokens) Delete(ctx context.Context, id string) error {
	err := ts.Client.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, tokenSecretPrefix+id, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("bootstrap: delete join token Secret kube-system/%s%s: %w", tokenSecretPrefix, id, err)
	}
	return nil
}

// DeleteForNode revokes every token CreateForNode made for node and returns how many it
// deleted. None is not an error: providers that boot nothing get no token.
func (ts Tokens) DeleteForNode(ctx context.Context, node string) (int, error) {
	if len(validation.IsValidLabelValue(node)) > 0 {
		return 0, nil
	}
	secrets := ts.Client.CoreV1().Secrets(metav1.NamespaceSystem)
	sel := ManagedByLabel + "=" + ManagedByValue + "," + NodeLabel + "=" + node
	list, err := secrets.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, fmt.Errorf("bootstrap: list join token Secrets of node %s in kube-system: %w", node, err)
	}
	deleted := 0
	var errs []error
	for _, s := range list.Items {
		if s.Type != tokenSecretType {
			continue
		}
		err := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{})
		switch {
		case err == nil:
			deleted++
		case apierrors.IsNotFound(err):
		default:
			errs = append(errs, fmt.Errorf("delete kube-system/%s: %w", s.Name, err))
		}
	}
	if len(errs) > 0 {
		return deleted, fmt.Errorf("bootstrap: revoke the join tokens of node %s: %w", node, errors.Join(errs...))
	}
	return deleted, nil
}

func withManagedBy(labels map[string]string) map[string]string {
	out := map[string]string{ManagedByLabel: ManagedByValue}
	for k, v := range labels {
		out[k] = v
	}
	return out
}

// CleanupExpired deletes the expired join tokens prebake made (by ManagedByLabel) and returns
// how many it deleted. Each delete is conditional on the Secret's UID, so a token re-created
// under the same name in between is kept.
func (ts Tokens) CleanupExpired(ctx context.Context) (int, error) {
	secrets := ts.Client.CoreV1().Secrets(metav1.NamespaceSystem)
	list, err := secrets.List(ctx, metav1.ListOptions{LabelSelector: ManagedByLabel + "=" + ManagedByValue})
	if err != nil {
		return 0, fmt.Errorf("bootstrap: list join token Secrets in kube-system: %w", err)
	}
	now := ts.now()
	deleted := 0
	var errs []error
	for _, s := range list.Items {
		if s.Type != tokenSecretType {
			continue
		}
		exp, err := time.Parse(time.RFC3339, string(s.Data["expiration"]))
		if err != nil {
			// Without an expiration the apiserver accepts the token forever; ours always
			// have one, so this one was edited: leave it to a person.
			errs = append(errs, fmt.Errorf("kube-system/%s: expiration %q is not RFC 3339; delete it by hand if unused", s.Name, s.Data["expiration"]))
			continue
		}
		if now.Before(exp) {
			continue
		}
		uid := types.UID(s.UID)
		err = secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			deleted++
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone already (the token cleaner was first), or replaced.
		default:
			errs = append(errs, fmt.Errorf("delete kube-system/%s: %w", s.Name, err))
		}
	}
	if len(errs) > 0 {
		return deleted, fmt.Errorf("bootstrap: clean up expired join tokens: %w", errors.Join(errs...))
	}
	return deleted, nil
}
