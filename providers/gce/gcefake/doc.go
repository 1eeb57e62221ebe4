// Package gcefake is a stateful fake of the Compute Engine REST API (v1) on
// loopback. The real cloud.google.com/go/compute/apiv1 REST clients talk to
// it unchanged through option.WithEndpoint(f.URL()) and
// option.WithoutAuthentication().
//
// It serves instances (insert, get, list and aggregatedList with label
// filters, stop, start, suspend, resume, setLabels and setMetadata with
// their fingerprints, getGuestAttributes, delete), zone and global operations
// (get, wait), images (insert from a disk, get, getFromFamily, list with
// filters, setLabels with the label fingerprint check, deprecate, delete),
// machine types (get, list, with accelerators) and firewall rules (get,
// insert, update, delete; firewalls.go). Bodies are the protojson of the computepb messages,
// which carry the REST field names, so the shapes are the real ones.
//
// Each instance also has its own metadata server on loopback (MetadataURL),
// through which a test plays the guest: it reads the user-data and writes
// guest attributes, which instances.getGuestAttributes then returns.
//
// An inserted instance exists from the moment the insert is accepted: get
// and list show it PROVISIONING while its insert operation runs, then
// PROVISIONING, STAGING and RUNNING for Options.Provisioning and Staging; an
// insert whose operation fails (a stockout) removes it when it ends. Stop,
// start, suspend and resume move it through the API's statuses
// (STOPPING/TERMINATED, SUSPENDING/SUSPENDED; lifecycle.go), and refuse a
// call in the wrong state as the API does.
//
// Requests are checked as the API checks them where prebake depends on it:
// label and name rules, maxResults of 0 to 500 (more is a 400), and the
// metadata limits (keys of [a-zA-Z0-9-_] under 128 bytes, values up to
// 256 KiB, all of it under 512 KB).
//
// Invariants:
//   - All state sits behind one mutex; time comes only from Options.Now, so a
//     test with a manual Clock decides when instances boot and operations end.
//   - Every request is logged, with the client's User-Agent and
//     x-goog-api-client headers, so tests can prove which client called.
//   - Injected faults answer as the real API does: HTTP errors with the
//     {"error": {"code", "message", "errors": [{"reason"}]}} body; capacity
//     and quota failures as an accepted insert whose operation ends DONE
//     with error.errors[].code and httpErrorStatusCode.
package gcefake
