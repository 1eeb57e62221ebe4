// Package hcloudfake is a stateful fake of the Hetzner Cloud API, served
// over HTTP on 127.0.0.1, for the parts prebake uses: servers, actions,
// images, server types, locations and datacenters. The real hcloud-go client
// talks to it unchanged through hcloud.WithEndpoint(f.URL()).
//
// The JSON bodies are hcloud-go's own schema types, so request and response
// shapes match what the client sends and parses.
//
// Server power actions (poweroff, shutdown, poweron; power.go) move a server
// between running, off and starting as actions that complete, and refuse
// one while another action of the server runs (423 locked).
//
// Labels are checked by the API's rules wherever they are sent (server
// create and update, image create and update), with the API's 400
// invalid_input answer.
//
// Invariants:
//   - Time comes from Options.Now only. A server's status (initializing →
//     starting → running) and an action's completion are derived from that
//     clock when read, so a test that owns the clock needs no sleeps.
//   - One mutex guards all state; every handler holds it for its whole run,
//     so concurrent requests see a serial history.
//   - Injected faults (Fail) are consumed in order, before any state changes,
//     so a failed request never leaves a half-made resource behind.
package hcloudfake
