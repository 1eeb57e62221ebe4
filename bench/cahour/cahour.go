// Package cahour replays one hour of cluster-autoscaler's loop against a
// core, in simulated time, for the API-request benchmarks (bench/hcloudrate,
// bench/gcerate): every 10 s a Refresh, TargetSize three times per group,
// NodeGroupNodes and NodeGroupForNode for every instance (TemplateNodeInfo
// for empty groups), and every 5 minutes one group scaled up by 5 and, a
// minute later, back down. The benchmark counts the cloud requests the core
// makes meanwhile.
package cahour

import (
	"context"
	"time"

	"github.com/prebake-dev/prebake/autoscaling"
)

// CA's loop and the churn the hour carries.
const (
	Loop       = 10 * time.Second // CA's --scan-interval
	ChurnEvery = 30               // loops between scale-ups (5 min)
	ChurnSize  = 5
	ChurnHold  = 6 // loops a churned group stays up (1 min)
	TargetRPCs = 3 // TargetSize calls per group per loop
)

// Hour is one replay.
type Hour struct {
	Core *autoscaling.Core
	// Length is the simulated time; Advance moves the shared clock of the
	// fake, the provider and the core.
	Length  time.Duration
	Advance func(time.Duration)
	// Machines is the fleet before the hour; Wait blocks (in real time)
	// until the fake holds n machines.
	Machines int
	Wait     func(n int) error
}

// Churn is what the hour created and deleted.
type Churn struct{ Creates, Deletes int }

// Run replays the hour. Refresh only kicks a re-list when the TTL has
// passed; Run calls Sync(false) after it so that re-list happens in the
// loop and the count does not hang on goroutine timing.
func (h Hour) Run(ctx context.Context) (Churn, error) {
	var out Churn
	core := h.Core
	groups := core.NodeGroups()
	var churned string
	var churnedOld map[string]bool
	for l := range int(h.Length / Loop) {
		h.Advance(Loop)
		_ = core.Refresh(ctx)
		core.Sync(ctx, false)
		for _, g := range groups {
			for range TargetRPCs {
				if _, err := core.TargetSize(g.ID); err != nil {
					return out, err
				}
			}
			views, err := core.Nodes(g.ID)
			if err != nil {
				return out, err
			}
			for _, v := range views {
				core.NodeGroupForNode(autoscaling.Node{ProviderID: v.ProviderID})
			}
			if len(views) == 0 {
				if _, err := core.TemplateNode(g.ID); err != nil {
					return out, err
				}
			}
		}
		switch {
		case l%ChurnEvery == 0:
			churned = groups[(l/ChurnEvery)%len(groups)].ID
			churnedOld = map[string]bool{}
			views, _ := core.Nodes(churned)
			for _, v := range views {
				churnedOld[v.ProviderID] = true
			}
			if err := core.IncreaseSize(churned, ChurnSize); err != nil {
				return out, err
			}
			if err := h.Wait(h.Machines + ChurnSize); err != nil {
				return out, err
			}
			out.Creates += ChurnSize
		case l%ChurnEvery == ChurnHold && churned != "":
			// The instances the scale-up added, by their real ids (the
			// core has listed them since).
			var del []autoscaling.Node
			views, _ := core.Nodes(churned)
			for _, v := range views {
				if !churnedOld[v.ProviderID] {
					del = append(del, autoscaling.Node{ProviderID: v.ProviderID})
				}
			}
			if err := core.DeleteNodes(churned, del); err != nil {
				return out, err
			}
			if err := h.Wait(h.Machines); err != nil {
				return out, err
			}
			out.Deletes += len(del)
		}
	}
	return out, nil
}

// StartFleet builds and starts a core for the benchmark (fast workers, no
// rate limit of its own: the fakes count every request), scales each group
// to perGroup machines, waits until the fake holds them all, and syncs once,
// so the hour starts from a settled fleet. stop shuts the core down.
func StartFleet(ctx context.Context, o autoscaling.Options, perGroup int, wait func(n int) error) (core *autoscaling.Core, stop func(), err error) {
	o.Workers = autoscaling.WorkerOptions{Parallelism: 16, QPS: 1e6, Burst: 1e6, RetryBase: time.Millisecond}
	core, err = autoscaling.New(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	if err := core.Start(cctx); err != nil {
		cancel()
		return nil, nil, err
	}
	stop = func() {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		_ = core.Shutdown(sctx)
		cancel()
	}
	for _, g := range o.Groups {
		if err := core.IncreaseSize(g.ID, perGroup); err != nil {
			stop()
			return nil, nil, err
		}
	}
	if err := wait(perGroup * len(o.Groups)); err != nil {
		stop()
		return nil, nil, err
	}
	core.Sync(ctx, true)
	return core, stop, nil
}
