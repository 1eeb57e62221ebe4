// Package hcloud is the Hetzner Cloud provider, on the official hcloud-go
// client. Hetzner has no instance groups, so a node group is emulated with
// server labels.
//
// Invariants:
//   - Ownership lives in the cloud: every server we create carries
//     providers.LabelCluster, LabelGroup, LabelMachine and LabelImageKind.
//     Only servers carrying the cluster label are listed, and Delete
//     refuses any other.
//   - List answers from an inventory (inventory.go): a full scan by the
//     cluster label, all groups together, at most once per 10 s per page of
//     50 (a tenth of the hourly budget); in between only the servers in
//     flight (created, deleted, booting, going) are asked about, by their
//     machine label. A change nobody in prebake made shows at the next scan.
//   - Create is idempotent by name: the server name is the machine name the
//     core chose, and Hetzner names are unique per project, so a retry finds
//     the first server (by name lookup, or through uniqueness_error) instead
//     of making a second one.
//   - Create returns once the server's create_server action has ended: an
//     accepted server can still fail there. A failed one is a creation error
//     (create_server_failed); the server it may leave behind is deleted and
//     never listed, so it is never adopted as a machine.
//   - The providerID is hcloud://<server id> (package providerid), known only
//     once Create returns; ProviderID answers known=false.
//   - Every request goes through one pacer (an http.RoundTripper) that reads
//     the RateLimit headers and spreads the remaining budget until the
//     reset; hcloud-go's retry handler backs off with jitter on 429.
//   - User-data is passed through to the API and never logged.
//   - Warm-pool standbys (standby.go, with Options.StandbySSHKey) are joined
//     over SSH: a server's user_data can't change after it is created. A
//     standby carries the marker providers.LabelStandby and the fingerprint
//     of the host key prebake made for it (LabelStandbyHostKey), so a
//     restarted prebake checks every host key against the cloud; Resume
//     removes the marker before it powers the server on.
package hcloud
