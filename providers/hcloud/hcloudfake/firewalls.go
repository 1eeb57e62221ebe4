package hcloudfake

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

// Firewalls, in the API's shapes (https://docs.hetzner.cloud/reference/cloud#firewalls):
// GET/POST /firewalls, GET /firewalls/{id}, and the actions set_rules and
// apply_to_resources. Names are unique; an inbound rule needs source_ips, a tcp or udp rule
// a port. A firewall applied to a label selector applies to every server whose labels match,
// now and later (FirewallsOf).

type firewall struct {
	schema schema.Firewall
}

// Firewalls returns a copy of every firewall, by id.
func (f *Fake) Firewalls() []schema.Firewall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []schema.Firewall
	for _, id := range slices.Sorted(maps.Keys(f.firewalls)) {
		out = append(out, copyFirewall(f.firewalls[id].schema))
	}
	return out
}

// FirewallsOf returns the ids of the firewalls that apply to the server: those it was
// created with and those applied to it or to a label selector its labels match.
func (f *Fake) FirewallsOf(serverID int64) []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.servers[serverID]
	if !ok {
		return nil
	}
	ids := slices.Clone(s.firewalls)
	for _, id := range slices.Sorted(maps.Keys(f.firewalls)) {
		if f.appliesTo(f.firewalls[id].schema, s) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

func (f *Fake) appliesTo(fw schema.Firewall, s *server) bool {
	for _, r := range fw.AppliedTo {
		switch r.Type {
		case "server":
			if r.Server != nil && r.Server.ID == s.schema.ID {
				return true
			}
		case "label_selector":
			if sel, err := parseSelector(r.LabelSelector.Selector); err == nil && sel.matches(s.schema.Labels) {
				return true
			}
		}
	}
	return false
}

// routeFirewalls answers the firewall endpoints; it returns false for any other path.
func (f *Fake) routeFirewalls(w http.ResponseWriter, r *http.Request, parts []string, now time.Time) bool {
	if len(parts) == 0 || parts[0] != "firewalls" {
		return false
	}
	switch {
	case len(parts) == 1 && r.Method == http.MethodGet:
		f.listFirewalls(w, r, now)
	case len(parts) == 1 && r.Method == http.MethodPost:
		f.createFirewall(w, r, now)
	case len(parts) == 2 && r.Method == http.MethodGet:
		id, ok := parseID(w, parts[1])
		if !ok {
			return true
		}
		fw, found := f.firewalls[id]
		if !found {
			notFound(w)
			return true
		}
		writeJSON(w, http.StatusOK, schema.FirewallGetResponse{Firewall: f.firewallView(fw.schema, now)})
	case len(parts) == 4 && parts[2] == "actions" && r.Method == http.MethodPost:
		id, ok := parseID(w, parts[1])
		if !ok {
			return true
		}
		fw, found := f.firewalls[id]
		if !found {
			notFound(w)
			return true
		}
		switch parts[3] {
		case "set_rules":
			f.setFirewallRules(w, r, fw, now)
		case "apply_to_resources":
			f.applyFirewall(w, r, fw, now)
		default:
			notFound(w)
		}
	default:
		notFound(w)
	}
	return true
}

func (f *Fake) listFirewalls(w http.ResponseWriter, r *http.Request, now time.Time) {
	sel, err := parseSelector(r.URL.Query().Get("label_selector"))
	if err != nil {
		writeError(w, invalidInput(err.Error()))
		return
	}
	name := r.URL.Query().Get("name")
	var out []schema.Firewall
	for _, id := range slices.Sorted(maps.Keys(f.firewalls)) {
		fw := f.firewalls[id].schema
		if (name != "" && fw.Name != name) || !sel.matches(fw.Labels) {
			continue
		}
		out = append(out, f.firewallView(fw, now))
	}
	writePage(w, r, "firewalls", out)
}

func (f *Fake) createFirewall(w http.ResponseWriter, r *http.Request, now time.Time) {
	var req schema.FirewallCreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, invalidInput("invalid JSON: "+err.Error()))
		return
	}
	if req.Name == "" {
		writeError(w, invalidInput("name is required"))
		return
	}
	for _, fw := range f.firewalls {
		if fw.schema.Name == req.Name {
			writeError(w, APIError{Status: http.StatusConflict, Code: "uniqueness_error", Message: "name is already used"})
			return
		}
	}
	rules, err := firewallRules(req.Rules)
	if err != nil {
		writeError(w, invalidInput(err.Error()))
		return
	}
	if err := f.checkResources(req.ApplyTo); err != nil {
		writeError(w, invalidInput(err.Error()))
		return
	}
	labels := map[string]string{}
	if req.Labels != nil {
		labels = maps.Clone(*req.Labels)
	}
	fw := &firewall{schema: schema.Firewall{ID: f.id(), Name: req.Name, Labels: labels, Created: now,
		Rules: rules, AppliedTo: slices.Clone(req.ApplyTo)}}
	if f.firewalls == nil {
		f.firewalls = map[int64]*firewall{}
	}
	f.firewalls[fw.schema.ID] = fw
	var actions []schema.Action
	if len(req.ApplyTo) > 0 {
		actions = append(actions, f.newAction("apply_firewall", now, schema.ActionResourceReference{ID: fw.schema.ID, Type: "firewall"}).schema)
	}
	writeJSON(w, http.StatusCreated, schema.FirewallCreateResponse{Firewall: f.firewallView(fw.schema, now), Actions: actions})
}

func (f *Fake) setFirewallRules(w http.ResponseWriter, r *http.Request, fw *firewall, now time.Time) {
	var req schema.FirewallActionSetRulesRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, invalidInput("invalid JSON: "+err.Error()))
		return
	}
	rules, err := firewallRules(req.Rules)
	if err != nil {
		writeError(w, invalidInput(err.Error()))
		return
	}
	fw.schema.Rules = rules
	a := f.newAction("set_firewall_rules", now, schema.ActionResourceReference{ID: fw.schema.ID, Type: "firewall"})
	writeJSON(w, http.StatusCreated, schema.FirewallActionSetRulesResponse{Actions: []schema.Action{a.schema}})
}

func (f *Fake) applyFirewall(w http.ResponseWriter, r *http.Request, fw *firewall, now time.Time) {
	var req schema.FirewallActionApplyToResourcesRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, invalidInput("invalid JSON: "+err.Error()))
		return
	}
	if err := f.checkResources(req.ApplyTo); err != nil {
		writeError(w, invalidInput(err.Error()))
		return
	}
	for _, res := range req.ApplyTo {
		for _, have := range fw.schema.AppliedTo {
			if sameResource(have, res) {
				writeError(w, APIError{Status: http.StatusUnprocessableEntity, Code: "firewall_already_applied", Message: "firewall is already applied to the resource"})
				return
			}
		}
	}
	fw.schema.AppliedTo = append(fw.schema.AppliedTo, req.ApplyTo...)
	a := f.newAction("apply_firewall", now, schema.ActionResourceReference{ID: fw.schema.ID, Type: "firewall"})
	writeJSON(w, http.StatusCreated, schema.FirewallActionApplyToResourcesResponse{Actions: []schema.Action{a.schema}})
}

func sameResource(a, b schema.FirewallResource) bool {
	switch {
	case a.Type != b.Type:
		return false
	case a.Type == "server":
		return a.Server != nil && b.Server != nil && a.Server.ID == b.Server.ID
	default:
		return a.LabelSelector != nil && b.LabelSelector != nil && a.LabelSelector.Selector == b.LabelSelector.Selector
	}
}

func (f *Fake) checkResources(res []schema.FirewallResource) error {
	for i, r := range res {
		switch r.Type {
		case "server":
			if r.Server == nil {
				return fmt.Errorf("apply_to[%d]: server is required for type server", i)
			}
			if _, ok := f.servers[r.Server.ID]; !ok {
				return fmt.Errorf("apply_to[%d]: server %d not found", i, r.Server.ID)
			}
		case "label_selector":
			if r.LabelSelector == nil || r.LabelSelector.Selector == "" {
				return fmt.Errorf("apply_to[%d]: label_selector is required for type label_selector", i)
			}
			if _, err := parseSelector(r.LabelSelector.Selector); err != nil {
				return fmt.Errorf("apply_to[%d]: %v", i, err)
			}
		default:
			return fmt.Errorf("apply_to[%d]: type %q must be server or label_selector", i, r.Type)
		}
	}
	return nil
}

var firewallProtocols = []string{"tcp", "udp", "icmp", "esp", "gre"}

// firewallRules checks rules as the API does and returns them as it stores them.
func firewallRules(req []schema.FirewallRuleRequest) ([]schema.FirewallRule, error) {
	out := []schema.FirewallRule{}
	for i, r := range req {
		where := fmt.Sprintf("rules[%d]", i)
		switch r.Direction {
		case "in":
			if len(r.SourceIPs) == 0 {
				return nil, fmt.Errorf("%s: source_ips is required for direction in", where)
			}
		case "out":
			if len(r.DestinationIPs) == 0 {
				return nil, fmt.Errorf("%s: destination_ips is required for direction out", where)
			}
		default:
			return nil, fmt.Errorf("%s: direction %q must be in or out", where, r.Direction)
		}
		if !slices.Contains(firewallProtocols, r.Protocol) {
			return nil, fmt.Errorf("%s: protocol %q must be one of %s", where, r.Protocol, strings.Join(firewallProtocols, ", "))
		}
		hasPort := r.Port != nil && *r.Port != ""
		if (r.Protocol == "tcp" || r.Protocol == "udp") != hasPort {
			return nil, fmt.Errorf("%s: port is required for tcp and udp and not allowed otherwise", where)
		}
		for _, c := range append(slices.Clone(r.SourceIPs), r.DestinationIPs...) {
			if _, _, err := net.ParseCIDR(c); err != nil {
				return nil, fmt.Errorf("%s: %q is not a CIDR", where, c)
			}
		}
		out = append(out, schema.FirewallRule{Direction: r.Direction, SourceIPs: nonNilStrings(r.SourceIPs),
			DestinationIPs: nonNilStrings(r.DestinationIPs), Protocol: r.Protocol, Port: r.Port, Description: r.Description})
	}
	return out, nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

// firewallView is the firewall as the API shows it: a label selector lists the servers
// it applies to now.
func (f *Fake) firewallView(fw schema.Firewall, now time.Time) schema.Firewall {
	out := copyFirewall(fw)
	for i, r := range out.AppliedTo {
		if r.Type != "label_selector" {
			continue
		}
		sel, _ := parseSelector(r.LabelSelector.Selector)
		for _, id := range slices.Sorted(maps.Keys(f.servers)) {
			s := f.servers[id]
			if sel.matches(s.schema.Labels) && f.view(s, now).Status != "deleting" {
				out.AppliedTo[i].AppliedToResources = append(out.AppliedTo[i].AppliedToResources,
					schema.FirewallResource{Type: "server", Server: &schema.FirewallResourceServer{ID: id}})
			}
		}
	}
	return out
}

func copyFirewall(fw schema.Firewall) schema.Firewall {
	out := fw
	out.Labels = maps.Clone(fw.Labels)
	out.Rules = slices.Clone(fw.Rules)
	out.AppliedTo = slices.Clone(fw.AppliedTo)
	return out
}
