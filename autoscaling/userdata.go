package autoscaling

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
)

// UserDataSource renders a machine's user-data when its worker creates it:
// off the request path, since it makes a join token in the cluster.
// providerID is "" when the provider learns it only from Create (hcloud) or
// at boot (static).
type UserDataSource interface {
	UserData(ctx context.Context, provider string, req providers.CreateRequest, providerID string) ([]byte, error)
}

// scriptProviders get the node script itself rather than #cloud-config:
// their machines have no cloud-init datasource (static pipes it to sh -s).
var scriptProviders = map[string]bool{"static": true}

// noUserDataProviders boot nothing, so rendering would only mint tokens.
var noUserDataProviders = map[string]bool{"kwok": true}

// BootstrapUserData renders user-data with package bootstrap: one fresh
// join token per machine (TTL at most an hour), the cluster to join, and the
// components to have at exact versions. Expired tokens it made are deleted
// at most every CleanupEvery.
type BootstrapUserData struct {
	Tokens     bootstrap.Tokens
	Cluster    bootstrap.Cluster
	Components []bootstrap.Component
	Options    bootstrap.Options
	Log        *slog.Logger
	// CleanupEvery bounds how often UserData deletes expired tokens; 0
	// means 10 minutes.
	CleanupEvery time.Duration

	mu          sync.Mutex // guards lastCleanup
	lastCleanup time.Time
}

// Check renders once with a throwaway token, so a bad cluster or component
// setting fails at startup rather than at the first scale-up.
func (b *BootstrapUserData) Check() error {
	_, err := bootstrap.Render(b.input("static", providers.CreateRequest{Name: "check"}, "", "abcdef.0123456789abcdef"))
	return err
}

// UserData implements UserDataSource.
func (b *BootstrapUserData) UserData(ctx context.Context, provider string, req providers.CreateRequest, providerID string) ([]byte, error) {
	if noUserDataProviders[provider] {
		return nil, nil
	}
	b.cleanup(ctx)
	tok, err := b.Tokens.CreateForNode(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	ud, err := bootstrap.Render(b.input(provider, req, providerID, tok.Value()))
	if err != nil {
		// The token is useless now; it expires by itself if this fails too.
		_ = b.Tokens.Delete(ctx, tok.ID)
		return nil, err
	}
	if scriptProviders[provider] {
		return ud.Script, nil
	}
	return ud.CloudConfig, nil
}

// JoinTokenRevoker is implemented by a UserDataSource whose user-data
// carries a join token: it revokes every token made for a machine that is
// gone. The canary uses it; a scaled-up node's token just expires.
type JoinTokenRevoker interface {
	RevokeJoinTokens(ctx context.Context, machine string) (int, error)
}

// RevokeJoinTokens implements JoinTokenRevoker.
func (b *BootstrapUserData) RevokeJoinTokens(ctx context.Context, machine string) (int, error) {
	return b.Tokens.DeleteForNode(ctx, machine)
}

func (b *BootstrapUserData) input(provider string, req providers.CreateRequest, providerID, token string) bootstrap.Input {
	in := bootstrap.Input{
		Provider: provider, Cluster: b.Cluster, JoinToken: token, NodeName: req.Name, ProviderID: providerID,
		Labels: kubeletLabels(req.NodeLabels), Components: b.Components, Options: b.Options,
	}
	for _, t := range req.NodeTaints {
		in.Taints = append(in.Taints, bootstrap.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	return in
}

// kubeletLabels drops the labels the kubelet sets itself from what it
// registers through --node-labels. What is left (instance type, zone,
// region, prebake.dev/*, the group's own labels) is what NodeRestriction
// lets a kubelet set on its Node.
func kubeletLabels(l map[string]string) map[string]string {
	out := maps.Clone(l)
	for _, k := range []string{providers.LabelHostname, providers.LabelArch, providers.LabelOS} {
		delete(out, k)
	}
	return out
}

func (b *BootstrapUserData) cleanup(ctx context.Context) {
	every := b.CleanupEvery
	if every <= 0 {
		every = 10 * time.Minute
	}
	b.mu.Lock()
	due := time.Since(b.lastCleanup) >= every
	if due {
		b.lastCleanup = time.Now()
	}
	b.mu.Unlock()
	if !due {
		return
	}
	n, err := b.Tokens.CleanupExpired(ctx)
	log := b.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err != nil {
		log.Warn("join tokens: cleanup of expired ones failed", "err", err)
	} else if n > 0 {
		log.Info("join tokens: deleted expired ones", "count", n)
	}
}

// userDataFor is what the worker sends as user-data: the group's
// userDataFile verbatim when set, else what the source renders.
func (c *Core) userDataFor(ctx context.Context, inst *instance) ([]byte, error) {
	c.mu.RLock()
	req, pid, placeholder := inst.req, inst.providerID, inst.placeholder
	c.mu.RUnlock()
	if len(req.UserData) > 0 || c.opts.UserData == nil {
		return req.UserData, nil
	}
	if placeholder {
		pid = ""
	}
	ud, err := c.opts.UserData.UserData(ctx, inst.group.provider.Name(), req, pid)
	if err != nil {
		return nil, fmt.Errorf("render user-data for %s: %w", req.Name, err)
	}
	return ud, nil
}
