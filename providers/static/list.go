package static

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/prebake-dev/prebake/providers"
)

// List implements providers.Provider: one instance per claim of this
// cluster. A claim whose bootstrap has not finished is creating, a ready one
// running, one being released deleting.
func (p *Provider) List(ctx context.Context) ([]providers.Instance, error) {
	claims, err := p.listClaims(ctx, p.ownedSelector(nil))
	if err != nil {
		return nil, fmt.Errorf("static: list machines: %w", err)
	}
	out := make([]providers.Instance, 0, len(claims))
	for i := range claims {
		out = append(out, instanceFromClaim(&claims[i]))
	}
	slices.SortFunc(out, func(a, b providers.Instance) int { return cmp.Compare(a.ProviderID, b.ProviderID) })
	return out, nil
}
