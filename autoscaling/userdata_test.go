package autoscaling

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers/fake"
)

// tokenSource is a UserDataSource as prebake serve's bootstrap one is, for
// the core's side of it: a fresh join token per machine, revocable by
// machine; the user-data names the token.
type tokenSource struct{ tokens bootstrap.Tokens }

func bootstrapSource(client *kubefake.Clientset) *tokenSource {
	return &tokenSource{tokens: bootstrap.Tokens{Client: client}}
}

func (s *tokenSource) UserData(ctx context.Context, m Machine) ([]byte, error) {
	tok, err := s.tokens.CreateForNode(ctx, m.Request.Name)
	if err != nil {
		return nil, err
	}
	return []byte("#cloud-config\n# join with " + tok.Value() + "\n"), nil
}

func (s *tokenSource) RevokeJoinTokens(ctx context.Context, machine string) (int, error) {
	return s.tokens.DeleteForNode(ctx, machine)
}

func joinTokens(t *testing.T, client *kubefake.Clientset) int {
	t.Helper()
	l, err := client.CoreV1().Secrets(metav1.NamespaceSystem).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// The user-data is rendered for each attempt and never kept on the
// instance: the join token in it is a secret.
func TestUserDataIsNotKept(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	p := fake.New()
	c := newCoreWith(t, p, func(o *Options) { o.UserData = bootstrapSource(client) })
	if err := c.IncreaseSize("g1", 2); err != nil {
		t.Fatal(err)
	}
	r1, r2 := nthRequest(t, p, 1), nthRequest(t, p, 2)
	if len(r1.UserData) == 0 || string(r1.UserData) == string(r2.UserData) {
		t.Fatalf("user-data %q and %q: want one rendering per machine", r1.UserData, r2.UserData)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, inst := range c.groups["g1"].instances {
		if len(inst.req.UserData) != 0 {
			t.Errorf("instance %s keeps %d bytes of user-data", inst.name, len(inst.req.UserData))
		}
	}
}

// TestJoinTokenRevokedOnceTheNodeRegisters: a machine's join token is deleted as soon as its
// Node registers (the kubelet has its own certificate by then), and only that machine's; a
// machine adopted from the cloud (whose token this process did not make) costs no API call.
func TestJoinTokenRevokedOnceTheNodeRegisters(t *testing.T) {
	t.Parallel()
	client := kubefake.NewClientset()
	p := fake.New()
	p.NameValue, p.KnownIDs = "gce", true
	g := GroupSpec{ID: "g1", Provider: "gce", MinSize: 0, MaxSize: 10, MachineType: "m1", Zone: "z1"}
	c := newCoreWith(t, p, func(o *Options) { o.UserData = bootstrapSource(client) }, g)
	if err := c.IncreaseSize("g1", 2); err != nil {
		t.Fatal(err)
	}
	r1, r2 := nthRequest(t, p, 1), nthRequest(t, p, 2)
	if n := joinTokens(t, client); n != 2 {
		t.Fatalf("%d join tokens, want one per machine", n)
	}
	pid1, _ := p.ProviderID(r1)
	c.ObserveNode(r1.Name, pid1, false, c.now())
	eventually(t, "the registered machine's token revoked", func() bool { return joinTokens(t, client) == 1 })
	l, err := client.CoreV1().Secrets(metav1.NamespaceSystem).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Items[0].Labels[bootstrap.NodeLabel]; got != r2.Name {
		t.Errorf("the token left is %s's, want %s's (not registered yet)", got, r2.Name)
	}
	if got := testutil.ToFloat64(c.metrics.joinTokensRevoked); got != 1 {
		t.Errorf("prebake_join_tokens_revoked_total = %v, want 1", got)
	}

	// An adopted machine: its Node registering lists no Secrets.
	pid2, _ := p.ProviderID(r2)
	c.mu.Lock()
	adopted := c.index.byID(pid2)
	adopted.adopted = true
	c.mu.Unlock()
	lists := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "secrets" {
			lists++
		}
	}
	c.ObserveNode(r2.Name, pid2, false, c.now())
	c.ObserveNode(r1.Name, pid1, true, c.now())     // Ready: no second revocation
	if err := c.Shutdown(t.Context()); err != nil { // waits for any revocation it started
		t.Fatal(err)
	}
	after := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "secrets" {
			after++
		}
	}
	if after != lists {
		t.Errorf("%d more Secret lists after an adopted machine registered and a registered one turned Ready, want none", after-lists)
	}
}
