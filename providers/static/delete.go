package static

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prebake-dev/prebake/providers"
	"github.com/prebake-dev/prebake/providers/static/providerid"
)

// Delete implements providers.Provider. It marks the claim releasing,
// drains the machine's Node (cordon, then evict, bounded by
// Options.DrainTimeout), runs the reset command over SSH and deletes the
// claim. A machine that is already free is not an error; a claim of
// another cluster is left alone. When the reset fails the claim stays
// (releasing), so the machine is not handed out half-reset, and the error
// asks for a retry.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	host, err := providerid.Parse(providerID)
	if err != nil {
		return fmt.Errorf("static: delete: %w", err)
	}
	unlock := p.hosts.lock(host)
	defer unlock()

	claim, err := p.client.CoordinationV1().Leases(p.namespace).Get(ctx, host, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("static: delete %s: get claim %s/%s: %w", providerID, p.namespace, host, err)
	}
	if owner := claim.Labels[providers.LabelCluster]; owner != p.cluster {
		p.log.Warn("not releasing a machine another cluster holds", "host", host, "owner", owner)
		return nil
	}
	log := p.log.With("group", claim.Labels[providers.LabelGroup], "instance", claim.Labels[providers.LabelMachine], "host", host, "providerID", providerID)
	if claim.DeletionTimestamp != nil {
		return nil
	}
	if claim, err = p.setPhase(ctx, claim, phaseReleasing); err != nil {
		return fmt.Errorf("static: delete %s: %w", providerID, err)
	}
	if err := p.drain(ctx, providerID, log); err != nil {
		// A drain that can't finish must not keep the machine forever:
		// the core deletes only nodes CA decided to remove.
		log.Warn("drain incomplete; resetting anyway", "err", err)
	}
	m, inPool := p.byHost[host]
	if inPool {
		if err := p.shell.Run(ctx, m, []byte(p.reset+"\n")); err != nil {
			log.Warn("reset failed", append([]any{"err", err}, logStderr(err)...)...)
			return fmt.Errorf("static: delete %s: reset: %w; the machine stays claimed (releasing) until a Delete succeeds", providerID, err)
		}
	} else {
		log.Warn("machine is no longer in the pool; releasing its claim without a reset")
	}
	if err := p.deleteClaim(ctx, claim); err != nil {
		return fmt.Errorf("static: delete %s: %w", providerID, err)
	}
	log.Info("machine reset and released")
	return nil
}
