// Package autoscaling is prebake's core: node groups, target sizes, the
// lifecycle of instances, scale-from-zero templates, the creation workers
// and the timeline metrics. It knows clouds only through providers.Provider.
//
// Invariants:
//   - Every read (NodeGroups, NodeGroupForNode, TargetSize, Nodes,
//     TemplateNode, GPU*) is answered from memory under a read lock; no read
//     calls a cloud.
//   - A group's target size is the number of its instances that are not
//     being deleted. It is derived, never stored, so it can't drift from the
//     instance list.
//   - IncreaseSize records instances (state creating, with the providerID
//     they will register with, or a placeholder) and returns; bounded
//     per-provider workers create the machines.
//   - DecreaseTargetSize only cancels instances that have not come up;
//     DeleteNodes never takes a group below its minimum.
//   - The cloud is the source of truth: after a restart Sync rebuilds every
//     instance from providers' List.
//   - A Reservation (what the image canary, package canary, boots) is made
//     through the same request and the same worker queue as a scale-up,
//     counts in its group's target while it exists, and is deleted by the
//     worker delete path; Shutdown waits until every reservation is
//     released.
//   - A group's warm pool (warmpool.go) holds standbys: machines prepared up
//     to the join and parked. They are in no target and no CA view, but
//     target + pool never exceeds maxSize. IncreaseSize takes parked
//     standbys on the channel's current image first (the workers resume
//     them, with fresh user-data; a failed resume falls back to a create in
//     the same scale-up) and creates the rest. The pool loop refills,
//     parks and replaces standbys in the background, never on CA's request
//     path; after a restart the pool is rebuilt from List.
//   - The core knows Kubernetes only through NodeClient, EventSink and
//     UserDataSource; their adapters (the Node watch, Events, bootstrap's
//     user-data) live in the composition root, cmd/prebake/app.
package autoscaling
