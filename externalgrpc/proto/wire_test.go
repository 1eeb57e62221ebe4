package protos

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The tests here check our generated code against the field numbers and wire
// types written in the protocol spec (kubernetes/autoscaler cluster-autoscaler/cloudprovider/externalgrpc/protos/externalgrpc.proto), using only
// protowire for the spec side: a wrong number or type in externalgrpc.proto
// makes them fail whatever the generated code says.

// rawField is one field as the wire sees it.
type rawField struct {
	Num  protowire.Number
	Type protowire.Type
	// Val is the varint, fixed64 bits, or the bytes as a string.
	Val any
}

func appendRaw(b []byte, fs ...rawField) []byte {
	for _, f := range fs {
		b = protowire.AppendTag(b, f.Num, f.Type)
		switch f.Type {
		case protowire.VarintType:
			b = protowire.AppendVarint(b, f.Val.(uint64))
		case protowire.Fixed64Type:
			b = protowire.AppendFixed64(b, f.Val.(uint64))
		case protowire.BytesType:
			b = protowire.AppendString(b, f.Val.(string))
		}
	}
	return b
}

func parseRaw(t *testing.T, b []byte) []rawField {
	t.Helper()
	var out []rawField
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		f := rawField{Num: num, Type: typ}
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			f.Val, b = v, b[n:]
		case protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			f.Val, b = v, b[n:]
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			f.Val, b = string(v), b[n:]
		default:
			t.Fatalf("unexpected wire type %v for field %d", typ, num)
		}
		out = append(out, f)
	}
	return out
}

func varint(n protowire.Number, v uint64) rawField { return rawField{n, protowire.VarintType, v} }
func str(n protowire.Number, s string) rawField    { return rawField{n, protowire.BytesType, s} }
func msg(n protowire.Number, fs ...rawField) rawField {
	return rawField{n, protowire.BytesType, string(appendRaw(nil, fs...))}
}
func double(n protowire.Number, f float64) rawField {
	return rawField{n, protowire.Fixed64Type, math.Float64bits(f)}
}

// mapEntry is a map<string,V> entry: key = 1, value = 2.
func mapEntry(n protowire.Number, k string, v rawField) rawField {
	v.Num = 2
	return msg(n, str(1, k), v)
}

// negTwo is int32(-2) as proto encodes it: sign-extended to 64 bits.
var negTwo = func() uint64 { v := int64(-2); return uint64(v) }()

func TestWireIdentity(t *testing.T) {
	t.Parallel()
	node := []rawField{str(1, "kwok://n1"), str(2, "n1"), mapEntry(3, "l", str(0, "v")), mapEntry(4, "a", str(0, "b"))}
	ts := []rawField{varint(1, 1700000000), varint(2, 5)}
	opts := []rawField{
		double(1, 0.5), double(2, 0.25),
		msg(3, varint(1, 600e9)), msg(4, varint(1, 1200e9)), msg(5, varint(1, 900e9)),
		varint(6, 1), varint(7, 1),
		msg(8, varint(1, 600)), msg(9, varint(1, 1200)), msg(10, varint(1, 900)),
	}
	tests := []struct {
		name string
		into proto.Message
		raw  []rawField
	}{
		{"NodeGroupsRequest", &NodeGroupsRequest{}, nil},
		{"NodeGroupsResponse", &NodeGroupsResponse{}, []rawField{msg(1, str(1, "g"), varint(2, 1), varint(3, 10), str(4, "dbg"))}},
		{"NodeGroupForNodeRequest", &NodeGroupForNodeRequest{}, []rawField{msg(1, node...)}},
		{"NodeGroupForNodeResponse", &NodeGroupForNodeResponse{}, []rawField{msg(1, str(1, "g"), varint(2, 1), varint(3, 5))}},
		{"PricingNodePriceRequest", &PricingNodePriceRequest{}, []rawField{msg(1, node...), msg(2, ts...), msg(3, ts...), msg(4, ts...), msg(5, ts...)}},
		{"PricingNodePriceResponse", &PricingNodePriceResponse{}, []rawField{double(1, 1.5)}},
		{"PricingPodPriceRequest", &PricingPodPriceRequest{}, []rawField{str(1, "legacy-pod"), msg(2, ts...), msg(3, ts...), str(4, "pod"), msg(5, ts...), msg(6, ts...)}},
		{"PricingPodPriceResponse", &PricingPodPriceResponse{}, []rawField{double(1, 0.1)}},
		{"GPULabelResponse", &GPULabelResponse{}, []rawField{str(1, "prebake.dev/gpu")}},
		{"GetAvailableGPUTypesResponse", &GetAvailableGPUTypesResponse{}, []rawField{mapEntry(1, "nvidia-t4", msg(0, str(1, "type.googleapis.com/x")))}},
		{"NodeGroupTargetSizeRequest", &NodeGroupTargetSizeRequest{}, []rawField{str(1, "g")}},
		{"NodeGroupTargetSizeResponse", &NodeGroupTargetSizeResponse{}, []rawField{varint(1, 7)}},
		{"NodeGroupIncreaseSizeRequest", &NodeGroupIncreaseSizeRequest{}, []rawField{varint(1, 3), str(2, "g")}},
		{"NodeGroupDeleteNodesRequest", &NodeGroupDeleteNodesRequest{}, []rawField{msg(1, node...), str(2, "g")}},
		// delta is negative: int32 -2 is sign-extended to a 10-byte varint.
		{"NodeGroupDecreaseTargetSizeRequest", &NodeGroupDecreaseTargetSizeRequest{}, []rawField{varint(1, negTwo), str(2, "g")}},
		{"NodeGroupNodesRequest", &NodeGroupNodesRequest{}, []rawField{str(1, "g")}},
		{"NodeGroupNodesResponse", &NodeGroupNodesResponse{}, []rawField{
			msg(1, str(1, "kwok://a"), msg(2, varint(1, 2), msg(2, str(1, "resource_unavailable"), str(2, "no capacity"), varint(3, 1)))),
			msg(1, str(1, "kwok://b"), msg(2, varint(1, 1))),
			msg(1, str(1, "kwok://c"), msg(2, varint(1, 3))),
		}},
		{"NodeGroupTemplateNodeInfoRequest", &NodeGroupTemplateNodeInfoRequest{}, []rawField{str(1, "g")}},
		{"NodeGroupTemplateNodeInfoResponse", &NodeGroupTemplateNodeInfoResponse{}, []rawField{str(1, "node"), str(2, "node")}},
		{"NodeGroupAutoscalingOptionsRequest", &NodeGroupAutoscalingOptionsRequest{}, []rawField{str(1, "g"), msg(2, opts...)}},
		{"NodeGroupAutoscalingOptionsResponse", &NodeGroupAutoscalingOptionsResponse{}, []rawField{msg(1, opts...)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := appendRaw(nil, tc.raw...)
			if err := proto.Unmarshal(in, tc.into); err != nil {
				t.Fatalf("unmarshal spec bytes: %v", err)
			}
			// Every spec field must be known to the generated type: unknown
			// fields would mean a wrong number or wire type.
			if u := unknownFields(tc.into.ProtoReflect()); len(u) > 0 {
				t.Fatalf("generated %s does not know spec fields: %v", tc.name, u)
			}
			out, err := proto.MarshalOptions{Deterministic: true}.Marshal(tc.into)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(canonical(t, tc.raw), canonical(t, appendRaw(nil, parseRaw(t, out)...))); diff != "" {
				t.Errorf("%s re-encoded differently from the spec (-spec +ours):\n%s", tc.name, diff)
			}
		})
	}
}

// unknownFields collects, at any depth, the fields the generated types did
// not recognise.
func unknownFields(m protoreflect.Message) []string {
	var out []string
	if u := m.GetUnknown(); len(u) > 0 {
		out = append(out, fmt.Sprintf("%s: %x", m.Descriptor().FullName(), []byte(u)))
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					out = append(out, unknownFields(mv.Message())...)
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := 0; i < v.List().Len(); i++ {
					out = append(out, unknownFields(v.List().Get(i).Message())...)
				}
			}
		case fd.Message() != nil:
			out = append(out, unknownFields(v.Message())...)
		}
		return true
	})
	return out
}

// canonical flattens nested messages into sorted paths so that map order
// and field order don't matter.
func canonical(t *testing.T, v any) []string {
	t.Helper()
	var b []byte
	switch v := v.(type) {
	case []rawField:
		b = appendRaw(nil, v...)
	case []byte:
		b = v
	}
	var out []string
	var walk func(prefix string, b []byte, depth int)
	walk = func(prefix string, b []byte, depth int) {
		for _, f := range parseRaw(t, b) {
			p := fmt.Sprintf("%s/%d", prefix, f.Num)
			if s, ok := f.Val.(string); ok && depth < 4 && looksLikeMessage(s) {
				out = append(out, p+":msg")
				walk(p, []byte(s), depth+1)
				continue
			}
			out = append(out, p+":"+fmt.Sprint(int(f.Type))+"="+stringify(f.Val))
		}
	}
	walk("", b, 0)
	slices.Sort(out)
	return out
}

func looksLikeMessage(s string) bool {
	b := []byte(s)
	if len(b) == 0 {
		return false
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > 100 || typ == protowire.StartGroupType || typ == protowire.EndGroupType || typ == protowire.Fixed32Type {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		b = b[n+m:]
	}
	return true
}

func stringify(v any) string { return fmt.Sprintf("%v", v) }

// TestServiceMethods checks the method paths gRPC puts on the wire.
func TestServiceMethods(t *testing.T) {
	t.Parallel()
	want := []string{
		"NodeGroups", "NodeGroupForNode", "PricingNodePrice", "PricingPodPrice", "GPULabel",
		"GetAvailableGPUTypes", "Cleanup", "Refresh", "NodeGroupTargetSize", "NodeGroupIncreaseSize",
		"NodeGroupDeleteNodes", "NodeGroupDecreaseTargetSize", "NodeGroupNodes",
		"NodeGroupTemplateNodeInfo", "NodeGroupGetOptions",
	}
	if got := CloudProvider_ServiceDesc.ServiceName; got != "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider" {
		t.Errorf("service name = %q", got)
	}
	var got []string
	for _, m := range CloudProvider_ServiceDesc.Methods {
		got = append(got, m.MethodName)
	}
	if len(CloudProvider_ServiceDesc.Streams) != 0 {
		t.Errorf("all RPCs must be unary, found streams %v", CloudProvider_ServiceDesc.Streams)
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("methods (-spec +ours):\n%s", diff)
	}
}
