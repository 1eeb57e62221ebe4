package gcefake

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Firewall rules (https://cloud.google.com/compute/docs/reference/rest/v1/firewalls):
// get, insert, update (PUT: the whole rule is replaced) and delete, each change a global
// operation. A rule has no labels; it is named, and its name is unique in the project.

// Firewalls returns a copy of every firewall rule, sorted by project and name.
func (f *Fake) Firewalls() []*computepb.Firewall {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	keys := make([]string, 0, len(f.firewalls))
	for k := range f.firewalls {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*computepb.Firewall, 0, len(keys))
	for _, k := range keys {
		out = append(out, proto.CloneOf(f.firewalls[k]))
	}
	return out
}

// rfc1035 is the form of a name or a network tag: 1-63 characters, a lower-case letter
// first, then letters, digits or dashes, not ending with a dash.
var rfc1035 = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// portRange is one entry of allowed[].ports: a port or a range.
var portRange = regexp.MustCompile(`^[0-9]{1,5}(-[0-9]{1,5})?$`)

// firewallProtocols are the IPProtocol names the API takes (a protocol number is taken too).
var firewallProtocols = []string{"tcp", "udp", "icmp", "esp", "ah", "sctp", "ipip", "all"}

func firewallNotFound(project, name string) *apiError {
	return notFound("projects/" + project + "/global/firewalls/" + name)
}

// checkFirewall applies the API's rules for the fields prebake sets, fills in the defaults
// (the default network, direction INGRESS, priority 1000) and returns the stored form.
func (f *Fake) checkFirewall(project string, body *computepb.Firewall) (*computepb.Firewall, *apiError) {
	pb := proto.CloneOf(body)
	name := pb.GetName()
	if !rfc1035.MatchString(name) {
		return nil, badRequest("Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", name)
	}
	network := pb.GetNetwork()
	if network == "" {
		network = "global/networks/default"
	}
	s := strings.TrimPrefix(network, "https://www.googleapis.com/compute/v1/")
	s = strings.TrimPrefix(s, "https://compute.googleapis.com/compute/v1/")
	np := project
	if rest, ok := strings.CutPrefix(s, "projects/"); ok {
		np, s, _ = strings.Cut(rest, "/")
	}
	nname, ok := strings.CutPrefix(s, "global/networks/")
	if !ok || !rfc1035.MatchString(nname) {
		return nil, badRequest("Invalid value for field 'resource.network': '%s'. The URL is malformed.", network)
	}
	pb.Network = proto.String(f.selfLink(np + "/global/networks/" + nname))
	switch pb.GetDirection() {
	case "":
		pb.Direction = proto.String("INGRESS")
	case "INGRESS", "EGRESS":
	default:
		return nil, badRequest("Invalid value for field 'resource.direction': '%s'. Must be INGRESS or EGRESS.", pb.GetDirection())
	}
	if pb.Priority == nil {
		pb.Priority = proto.Int32(1000)
	} else if p := pb.GetPriority(); p < 0 || p > 65535 {
		return nil, badRequest("Invalid value for field 'resource.priority': '%d'. Must be between 0 and 65535.", p)
	}
	for i, a := range pb.GetAllowed() {
		field := fmt.Sprintf("resource.allowed[%d]", i)
		protocol := strings.ToLower(a.GetIPProtocol())
		if n, err := strconv.Atoi(protocol); !slices.Contains(firewallProtocols, protocol) && (err != nil || n < 0 || n > 255) {
			return nil, badRequest("Invalid value for field '%s.IPProtocol': '%s'.", field, a.GetIPProtocol())
		}
		if len(a.GetPorts()) > 0 && protocol != "tcp" && protocol != "udp" && protocol != "sctp" {
			return nil, badRequest("Invalid value for field '%s.ports': ports are only allowed with tcp, udp or sctp, not '%s'.", field, a.GetIPProtocol())
		}
		for j, port := range a.GetPorts() {
			if !portRange.MatchString(port) {
				return nil, badRequest("Invalid value for field '%s.ports[%d]': '%s'. Must be a port or a range such as 51871 or 30000-32767.", field, j, port)
			}
		}
	}
	for _, tags := range []struct {
		field string
		items []string
	}{{"sourceTags", pb.GetSourceTags()}, {"targetTags", pb.GetTargetTags()}} {
		for i, tag := range tags.items {
			if !rfc1035.MatchString(tag) {
				return nil, badRequest("Invalid value for field 'resource.%s[%d]': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", tags.field, i, tag)
			}
		}
	}
	if pb.GetDirection() == "EGRESS" && len(pb.GetSourceTags()) > 0 {
		return nil, badRequest("Invalid value for field 'resource.sourceTags': source tags apply to INGRESS rules only.")
	}
	pb.Kind = proto.String("compute#firewall")
	pb.SelfLink = proto.String(f.selfLink(project + "/global/firewalls/" + name))
	return pb, nil
}

func (f *Fake) getFirewall(project, name string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	fw := f.firewalls[project+"/"+name]
	if fw == nil {
		return nil, firewallNotFound(project, name)
	}
	return proto.CloneOf(fw), nil
}

func (f *Fake) insertFirewall(project string, body *computepb.Firewall, ft *Fault) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	if err := f.ownProject(project, "compute.firewalls.create"); err != nil {
		return nil, err
	}
	pb, err := f.checkFirewall(project, body)
	if err != nil {
		return nil, err
	}
	key := project + "/" + pb.GetName()
	if f.firewalls[key] != nil {
		return nil, &apiError{http.StatusConflict, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/global/firewalls/%s' already exists", project, pb.GetName())}
	}
	id := f.newID()
	pb.Id = proto.Uint64(id)
	pb.CreationTimestamp = proto.String(timestamp(f.opts.Now()))
	f.firewalls[key] = pb
	op := f.newOperation(project, "global", "insert", pb.GetSelfLink(), id, ft)
	op.onDone = func(failed bool) {
		if failed && f.firewalls[key] == pb {
			delete(f.firewalls, key)
		}
	}
	f.settle()
	return proto.CloneOf(op.pb), nil
}

// updateFirewall is firewalls.update (PUT): every field of the rule is replaced by the
// body's; the name can't change. A failed operation leaves the rule as it was.
func (f *Fake) updateFirewall(project, name string, body *computepb.Firewall, ft *Fault) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	if err := f.ownProject(project, "compute.firewalls.update"); err != nil {
		return nil, err
	}
	key := project + "/" + name
	old := f.firewalls[key]
	if old == nil {
		return nil, firewallNotFound(project, name)
	}
	if body.GetName() != "" && body.GetName() != name {
		return nil, badRequest("Invalid value for field 'resource.name': '%s'. A firewall rule can't be renamed.", body.GetName())
	}
	body = proto.CloneOf(body)
	body.Name = proto.String(name)
	pb, err := f.checkFirewall(project, body)
	if err != nil {
		return nil, err
	}
	pb.Id, pb.CreationTimestamp = old.Id, old.CreationTimestamp
	f.firewalls[key] = pb
	op := f.newOperation(project, "global", "update", pb.GetSelfLink(), pb.GetId(), ft)
	op.onDone = func(failed bool) {
		if failed && f.firewalls[key] == pb {
			f.firewalls[key] = old
		}
	}
	f.settle()
	return proto.CloneOf(op.pb), nil
}

func (f *Fake) deleteFirewall(project, name string) (proto.Message, *apiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle()
	if err := f.ownProject(project, "compute.firewalls.delete"); err != nil {
		return nil, err
	}
	key := project + "/" + name
	fw := f.firewalls[key]
	if fw == nil {
		return nil, firewallNotFound(project, name)
	}
	delete(f.firewalls, key)
	op := f.newOperation(project, "global", "delete", fw.GetSelfLink(), fw.GetId(), nil)
	f.settle()
	return proto.CloneOf(op.pb), nil
}
