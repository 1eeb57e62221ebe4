// Package nodetimeline is `prebake timeline`: a per-node report of where a scale-up's time
// went, from the pod that was Pending to the first pod Running on the new node, and the
// annotation (Annotation) where `prebake serve` keeps the moments only it knows.
//
// Build is a pure function of API objects (Nodes, Pods, CA's Events): Read lists them from a
// cluster, Write renders the report as a table, Markdown or JSON.
//
// Invariants:
//   - Every time comes from an API object or the node's own report, and says whose clock
//     it is on; nothing is filled in from configuration. What can't be known is marked
//     unknown with the reason.
//   - A node's phases lie between consecutive moments of Chain, so the phases between two
//     known moments add up to the time between them; a phase that ends before it starts
//     (clocks that disagree) is flagged, never clamped.
//   - Phases of kwok's nodes are marked simulated.
//
// It imports no cmd/ or e2e/ package: the command, the demo and the tests share it.
package nodetimeline
