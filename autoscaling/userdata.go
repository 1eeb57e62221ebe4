package autoscaling

import (
	"context"
	"fmt"

	"github.com/prebake-dev/prebake/imagecatalog"
	"github.com/prebake-dev/prebake/providers"
)

// UserDataSource renders a machine's user-data when its worker creates it:
// off the request path, since it makes a join token in the cluster.
type UserDataSource interface {
	UserData(ctx context.Context, m Machine) ([]byte, error)
}

// Machine is what a UserDataSource renders for.
type Machine struct {
	// Provider is the provider's name and Capabilities what it declares:
	// the form of user-data its machines take, what its nodes need.
	Provider     string
	Capabilities providers.Capabilities
	Request      providers.CreateRequest
	// ProviderID is "" when the provider learns it only from Create
	// (hcloud) or at boot (static).
	ProviderID string
	// Family is the OS family the machine boots: cloud-init or Ignition
	// renders its user-data (Family.Renderer).
	Family imagecatalog.Family
	// Manifest is the catalog's manifest of the image the machine boots
	// (Request.Image): what is baked into it, at which versions. The zero
	// Manifest on the runtime-install path.
	Manifest imagecatalog.Manifest
}

// JoinTokenRevoker is implemented by a UserDataSource whose user-data
// carries a join token: it revokes every token made for a machine that is
// gone. The canary uses it; a scaled-up node's token just expires.
type JoinTokenRevoker interface {
	RevokeJoinTokens(ctx context.Context, machine string) (int, error)
}

// userDataFor is what the worker sends as user-data: the group's
// userDataFile verbatim when set, else what the source renders.
func (c *Core) userDataFor(ctx context.Context, inst *instance) ([]byte, error) {
	c.mu.RLock()
	req, pid, placeholder, family, manifest := inst.req, inst.providerID, inst.placeholder, inst.family, inst.manifest
	c.mu.RUnlock()
	if len(req.UserData) > 0 || c.opts.UserData == nil {
		return req.UserData, nil
	}
	if placeholder {
		pid = ""
	}
	p := inst.group.provider
	ud, err := c.opts.UserData.UserData(ctx, Machine{Provider: p.Name(), Capabilities: p.Capabilities(), Request: req, ProviderID: pid, Family: family, Manifest: manifest})
	if err != nil {
		return nil, fmt.Errorf("render user-data for %s: %w", req.Name, err)
	}
	return ud, nil
}
