package app

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prebake-dev/prebake/autoscaling"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/imagecatalog"
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
	// Networks are the groups' network modes (cilium-wireguard), by group.
	Networks map[string]bootstrap.Network
	// Sysext gives Flatcar and Fedora CoreOS nodes their Kubernetes sysext
	// for an arch (bootstrap.kubernetesSysext); nil when none is configured,
	// and then such a machine fails to render, saying so.
	Sysext func(arch string) bootstrap.Sysext
	Log    *slog.Logger
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
// (no token is made), the node script for those that run it over a shell, and
// for the others what their OS family reads: an Ignition config (Flatcar, Fedora
// CoreOS) or #cloud-config. A warm-pool standby's (Request.Standby) prepares the
// machine and stops before the join: it holds no token.
func (b *BootstrapUserData) UserData(ctx context.Context, m autoscaling.Machine) ([]byte, error) {
	if m.Capabilities.UserData == providers.UserDataNone {
		return nil, nil
	}
	ignition := m.Capabilities.UserData == providers.UserDataCloudInit && m.Family.Renderer() == imagecatalog.RendererIgnition
	if ignition {
		if err := b.ignitionReady(m); err != nil {
			return nil, err
		}
	}
	if m.Request.Standby != "" {
		if ignition {
			return nil, fmt.Errorf("node group %q boots %s, which reads Ignition at first boot only, so a resumed standby would never join: remove its warmPool", m.Request.Group, m.Family)
		}
		return b.render(m, "", false)
	}
	b.cleanup(ctx)
	tok, err := b.Tokens.CreateForNode(ctx, m.Request.Name)
	if err != nil {
		return nil, err
	}
	out, err := b.render(m, tok.Value(), ignition)
	if err != nil {
		// The token is useless now; it expires by itself if this fails too.
		_ = b.Tokens.Delete(ctx, tok.ID)
		return nil, err
	}
	return out, nil
}

// ignitionReady says why a machine of an Ignition family can't be
// rendered: no sysext configured, or no image of the family (the
// runtime-install path boots the provider's base image, a Debian or Ubuntu
// one, which reads no Ignition).
func (b *BootstrapUserData) ignitionReady(m autoscaling.Machine) error {
	switch {
	case b.Sysext == nil:
		return fmt.Errorf("node group %q boots %s, which takes an Ignition config with the Kubernetes sysext: set bootstrap.kubernetesSysext", m.Request.Group, m.Family)
	case m.Request.Image == "":
		return fmt.Errorf("node group %q boots %s but its channel gave no %s image (runtime install would boot the provider's Debian/Ubuntu base image, which reads no Ignition): publish a %s image to channel %q", m.Request.Group, m.Family, m.Family, m.Family, m.Request.ImageChannel)
	}
	return nil
}

func (b *BootstrapUserData) render(m autoscaling.Machine, token string, ignition bool) ([]byte, error) {
	in := b.input(m, token)
	if ignition {
		sysext, err := b.sysextFor(m)
		if err != nil {
			return nil, err
		}
		ic, err := bootstrap.RenderIgnition(bootstrap.IgnitionInput{
			Input: in, OS: bootstrap.IgnitionOS(m.Family), Sysext: sysext,
			Prebaked: m.Request.ImageKind == providers.ImagePrebaked,
		})
		if err != nil {
			return nil, err
		}
		return ic.JSON, nil
	}
	ud, err := bootstrap.Render(in)
	if err != nil {
		return nil, err
	}
	if m.Capabilities.UserData == providers.UserDataScript {
		return ud.Script, nil
	}
	return ud.CloudConfig, nil
}

// sysextFor is the Kubernetes sysext of an Ignition machine: bootstrap.
// kubernetesSysext's for the machine's arch, except that a prebaked image's
// version is the one its catalog manifest records (the sysext baked into
// it, which the join script checks the merged kubelet and kubeadm against:
// config's version would fail every node of an image promoted with another).
func (b *BootstrapUserData) sysextFor(m autoscaling.Machine) (bootstrap.Sysext, error) {
	s := b.Sysext(m.Request.NodeLabels[providers.LabelArch])
	if m.Request.ImageKind != providers.ImagePrebaked {
		return s, nil
	}
	v := m.Manifest.Components[imagecatalog.SysextComponent]
	if v == "" {
		return s, fmt.Errorf("node group %q: image %s has no %s in its catalog manifest, so the sysext version its nodes must find is unknown: publish the image with the manifest its build verified (prebake images publish)",
			m.Request.Group, m.Request.Image, imagecatalog.SysextComponent)
	}
	s.Version = v
	return s, nil
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
		Network: b.Networks[req.Group], UserDataForm: m.Capabilities.UserData,
	}
	if req.Standby != "" {
		in.Options.Standby = true
		in.StandbyResume = m.Capabilities.StandbyResume
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
