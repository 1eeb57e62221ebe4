package app

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/providers"
)

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
	_, err := bootstrap.Render(b.input(autoscaling.Machine{Provider: "static", Request: providers.CreateRequest{Name: "check"}}, "abcdef.0123456789abcdef"))
	return err
}

// UserData implements autoscaling.UserDataSource: nothing for machines that take none
// (no token is made), the node script for those that run it over a shell,
// #cloud-config for the others.
func (b *BootstrapUserData) UserData(ctx context.Context, m autoscaling.Machine) ([]byte, error) {
	if m.Capabilities.UserData == providers.UserDataNone {
		return nil, nil
	}
	b.cleanup(ctx)
	tok, err := b.Tokens.CreateForNode(ctx, m.Request.Name)
	if err != nil {
		return nil, err
	}
	ud, err := bootstrap.Render(b.input(m, tok.Value()))
	if err != nil {
		// The token is useless now; it expires by itself if this fails too.
		_ = b.Tokens.Delete(ctx, tok.ID)
		return nil, err
	}
	if m.Capabilities.UserData == providers.UserDataScript {
		return ud.Script, nil
	}
	return ud.CloudConfig, nil
}

// RevokeJoinTokens implements autoscaling.JoinTokenRevoker.
func (b *BootstrapUserData) RevokeJoinTokens(ctx context.Context, machine string) (int, error) {
	return b.Tokens.DeleteForNode(ctx, machine)
}

func (b *BootstrapUserData) input(m autoscaling.Machine, token string) bootstrap.Input {
	req := m.Request
	in := bootstrap.Input{
		Provider: m.Provider, Cluster: b.Cluster, JoinToken: token, NodeName: req.Name, ProviderID: m.ProviderID,
		Labels: kubeletLabels(req.NodeLabels), Components: b.Components, Runtime: m.Capabilities.NodeRuntime, Options: b.Options,
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
