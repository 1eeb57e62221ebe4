// Package gce is the Google Compute Engine provider, on the official
// cloud.google.com/go/compute/apiv1 REST clients. A node group is emulated
// with instance labels, as on Hetzner: no managed instance groups, so a
// scale-up names its instances itself.
//
// Invariants:
//   - Ownership lives in the cloud: every instance we create carries the
//     providers.Label* keys, mapped to GCE's key rules by LabelKey (the one
//     place that mapping lives). List is one aggregatedList scan filtered by
//     the cluster label, for every group and zone at once.
//   - Create is idempotent by name: the instance name is the machine name
//     the core chose and GCE names are unique per zone, so a retry finds the
//     first instance (by get, or through 409 alreadyExists). The providerID
//     gce://<project>/<zone>/<name> (package providerid) is therefore known
//     before the VM exists: ProviderID answers known=true.
//   - Create waits for the insert operation, because GCE reports stockouts
//     and quota (ZONE_RESOURCE_POOL_EXHAUSTED, QUOTA_EXCEEDED, …) only there;
//     Classify gives those codes the class CA's own GCE provider gives them.
//   - Every request goes through one rate limiter (an http.RoundTripper)
//     shared by all the compute clients.
//   - User-data is passed through as the metadata item user-data and never
//     logged.
//   - Warm-pool standbys (standby.go) carry the label prebake-dev_standby;
//     Resume removes it before it sets the join user-data (setMetadata) and
//     starts or resumes the instance, so no instance is both a standby and
//     joined. The standby's resume hook runs the new user-data, since the
//     instance-id, and so cloud-init's once-per-instance run, persists.
//     The same setLabels dates the take (prebake-dev_resuming) until the
//     start is done, and List shows a take left stopped past a short grace
//     as failed.
//   - The provider is also the image catalog's backend (builder.go, images.go):
//     image builders are instances without the ownership labels and without
//     a service account, that report through a guest attribute
//     (ReportNamespace/ReportKey) read with getGuestAttributes.
package gce
