package externalgrpc

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"

	"github.com/prebake-dev/prebake/autoscaling"
	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
)

// Server implements CA's CloudProvider service over the core.
type Server struct {
	protos.UnimplementedCloudProviderServer
	core *autoscaling.Core
}

// NewServer returns the service for core.
func NewServer(core *autoscaling.Core) *Server { return &Server{core: core} }

// Register adds the service to s.
func (s *Server) Register(g *grpc.Server) { protos.RegisterCloudProviderServer(g, s) }

// codeOf is the one mapping from the core's error kinds to gRPC codes.
func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, autoscaling.ErrUnknownGroup):
		return codes.NotFound
	case errors.Is(err, autoscaling.ErrInvalidArgument):
		return codes.InvalidArgument
	case errors.Is(err, autoscaling.ErrFailedPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, autoscaling.ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

func toStatus(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codeOf(err), err.Error())
}

func groupMsg(g autoscaling.GroupInfo) *protos.NodeGroup {
	return &protos.NodeGroup{Id: g.ID, MinSize: int32(g.MinSize), MaxSize: int32(g.MaxSize), Debug: g.Debug}
}

// PricingNodePrice answers CA's price expander with the node's group price
// per hour times the window (autoscaling.Core.NodePrice). A group without a
// price is FailedPrecondition naming the fix; CA then skips that group.
func (s *Server) PricingNodePrice(_ context.Context, req *protos.PricingNodePriceRequest) (*protos.PricingNodePriceResponse, error) {
	if req.GetNode() == nil {
		return nil, status.Error(codes.InvalidArgument, "PricingNodePrice: node is missing")
	}
	start, end, err := window(req.GetStartTimestamp(), req.GetEndTimestamp())
	if err != nil {
		return nil, err
	}
	p, err := s.core.NodePrice(nodeOf(req.GetNode()), start, end)
	if err != nil {
		return nil, toStatus(err)
	}
	return &protos.PricingNodePriceResponse{Price: p}, nil
}

// PricingPodPrice answers with the pod's theoretical minimum price
// (autoscaling.Core.PodPrice). pod_bytes is the protobuf encoding of a
// core/v1 Pod, as CA's client sends it (pod.Marshal()).
func (s *Server) PricingPodPrice(_ context.Context, req *protos.PricingPodPriceRequest) (*protos.PricingPodPriceResponse, error) {
	pod := &corev1.Pod{}
	if err := pod.Unmarshal(req.GetPodBytes()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "PricingPodPrice: pod_bytes is not a protobuf core/v1 Pod: %v", err)
	}
	start, end, err := window(req.GetStartTimestamp(), req.GetEndTimestamp())
	if err != nil {
		return nil, err
	}
	p, err := s.core.PodPrice(pod, start, end)
	if err != nil {
		return nil, toStatus(err)
	}
	return &protos.PricingPodPriceResponse{Price: p}, nil
}

// window checks a pricing request's start and end timestamps.
func window(start, end *timestamppb.Timestamp) (time.Time, time.Time, error) {
	if start == nil || end == nil {
		return time.Time{}, time.Time{}, status.Error(codes.InvalidArgument, "pricing: startTimestamp and endTimestamp are required")
	}
	if err := start.CheckValid(); err != nil {
		return time.Time{}, time.Time{}, status.Errorf(codes.InvalidArgument, "pricing: startTimestamp: %v", err)
	}
	if err := end.CheckValid(); err != nil {
		return time.Time{}, time.Time{}, status.Errorf(codes.InvalidArgument, "pricing: endTimestamp: %v", err)
	}
	return start.AsTime(), end.AsTime(), nil
}

func nodeOf(n *protos.ExternalGrpcNode) autoscaling.Node {
	if n == nil {
		return autoscaling.Node{}
	}
	return autoscaling.Node{ProviderID: n.GetProviderID(), Name: n.GetName(), Labels: n.GetLabels()}
}

func (s *Server) NodeGroups(context.Context, *protos.NodeGroupsRequest) (*protos.NodeGroupsResponse, error) {
	groups := s.core.NodeGroups()
	resp := &protos.NodeGroupsResponse{NodeGroups: make([]*protos.NodeGroup, 0, len(groups))}
	for _, g := range groups {
		resp.NodeGroups = append(resp.NodeGroups, groupMsg(g))
	}
	return resp, nil
}

func (s *Server) NodeGroupForNode(_ context.Context, req *protos.NodeGroupForNodeRequest) (*protos.NodeGroupForNodeResponse, error) {
	if req.GetNode() == nil {
		return nil, status.Error(codes.InvalidArgument, "NodeGroupForNode: node is missing")
	}
	g, ok := s.core.NodeGroupForNode(nodeOf(req.GetNode()))
	if !ok {
		// An empty id means "not autoscaled".
		return &protos.NodeGroupForNodeResponse{NodeGroup: &protos.NodeGroup{}}, nil
	}
	return &protos.NodeGroupForNodeResponse{NodeGroup: groupMsg(g)}, nil
}

func (s *Server) GPULabel(context.Context, *protos.GPULabelRequest) (*protos.GPULabelResponse, error) {
	return &protos.GPULabelResponse{Label: s.core.GPULabel()}, nil
}

func (s *Server) GetAvailableGPUTypes(context.Context, *protos.GetAvailableGPUTypesRequest) (*protos.GetAvailableGPUTypesResponse, error) {
	types := s.core.GPUTypes()
	resp := &protos.GetAvailableGPUTypesResponse{GpuTypes: make(map[string]*anypb.Any, len(types))}
	for _, t := range types {
		// Only the keys matter to CA.
		resp.GpuTypes[t] = &anypb.Any{}
	}
	return resp, nil
}

func (s *Server) Cleanup(context.Context, *protos.CleanupRequest) (*protos.CleanupResponse, error) {
	s.core.Cleanup()
	return &protos.CleanupResponse{}, nil
}

func (s *Server) Refresh(ctx context.Context, _ *protos.RefreshRequest) (*protos.RefreshResponse, error) {
	if err := s.core.Refresh(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &protos.RefreshResponse{}, nil
}

func (s *Server) NodeGroupTargetSize(_ context.Context, req *protos.NodeGroupTargetSizeRequest) (*protos.NodeGroupTargetSizeResponse, error) {
	n, err := s.core.TargetSize(req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &protos.NodeGroupTargetSizeResponse{TargetSize: int32(n)}, nil
}

func (s *Server) NodeGroupIncreaseSize(_ context.Context, req *protos.NodeGroupIncreaseSizeRequest) (*protos.NodeGroupIncreaseSizeResponse, error) {
	if err := s.core.IncreaseSize(req.GetId(), int(req.GetDelta())); err != nil {
		return nil, toStatus(err)
	}
	return &protos.NodeGroupIncreaseSizeResponse{}, nil
}

func (s *Server) NodeGroupDeleteNodes(_ context.Context, req *protos.NodeGroupDeleteNodesRequest) (*protos.NodeGroupDeleteNodesResponse, error) {
	nodes := make([]autoscaling.Node, 0, len(req.GetNodes()))
	for _, n := range req.GetNodes() {
		nodes = append(nodes, nodeOf(n))
	}
	if err := s.core.DeleteNodes(req.GetId(), nodes); err != nil {
		return nil, toStatus(err)
	}
	return &protos.NodeGroupDeleteNodesResponse{}, nil
}

func (s *Server) NodeGroupDecreaseTargetSize(_ context.Context, req *protos.NodeGroupDecreaseTargetSizeRequest) (*protos.NodeGroupDecreaseTargetSizeResponse, error) {
	if err := s.core.DecreaseTargetSize(req.GetId(), int(req.GetDelta())); err != nil {
		return nil, toStatus(err)
	}
	return &protos.NodeGroupDecreaseTargetSizeResponse{}, nil
}

func (s *Server) NodeGroupNodes(_ context.Context, req *protos.NodeGroupNodesRequest) (*protos.NodeGroupNodesResponse, error) {
	views, err := s.core.Nodes(req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &protos.NodeGroupNodesResponse{Instances: make([]*protos.Instance, 0, len(views))}
	for _, v := range views {
		st := &protos.InstanceStatus{InstanceState: stateOf(v.State)}
		if v.Error != nil {
			st.ErrorInfo = &protos.InstanceErrorInfo{
				ErrorCode: v.Error.Code, ErrorMessage: v.Error.Message, InstanceErrorClass: int32(v.Error.Class),
			}
		}
		resp.Instances = append(resp.Instances, &protos.Instance{Id: v.ProviderID, Status: st})
	}
	return resp, nil
}

func stateOf(s providers.InstanceState) protos.InstanceStatus_InstanceState {
	switch s {
	case providers.StateRunning:
		return protos.InstanceStatus_instanceRunning
	case providers.StateCreating:
		return protos.InstanceStatus_instanceCreating
	case providers.StateDeleting:
		return protos.InstanceStatus_instanceDeleting
	}
	return protos.InstanceStatus_unspecified
}

func (s *Server) NodeGroupTemplateNodeInfo(_ context.Context, req *protos.NodeGroupTemplateNodeInfoRequest) (*protos.NodeGroupTemplateNodeInfoResponse, error) {
	b, err := s.core.TemplateNode(req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	if len(b) == 0 {
		// Never OK with empty bytes: CA would dereference a nil template.
		return nil, status.Errorf(codes.Internal, "node group %q has no template", req.GetId())
	}
	// Field 1 for CA <= 1.34.1, field 2 for newer CA: the same bytes.
	return &protos.NodeGroupTemplateNodeInfoResponse{LegacyNodeInfo: b, NodeBytes: b}, nil
}

// NodeGroupGetOptions answers Unimplemented on purpose: answering with
// options zeroes CA's MaxNodeStartupTime, which has no proto field
// (kubernetes/autoscaler#10245; docs/operations.md). It is explicit here so
// nobody "fixes" it by accident.
func (s *Server) NodeGroupGetOptions(context.Context, *protos.NodeGroupAutoscalingOptionsRequest) (*protos.NodeGroupAutoscalingOptionsResponse, error) {
	return nil, errGetOptions
}

var errGetOptions = status.Error(codes.Unimplemented, "prebake uses CA's global autoscaling options (answering would zero MaxNodeStartupTime, see kubernetes/autoscaler#10245)")

// RPCMetrics is a unary interceptor recording per-RPC latency.
type RPCMetrics struct {
	seconds *prometheus.HistogramVec
}

// NewRPCMetrics registers prebake_rpc_seconds with reg.
func NewRPCMetrics(reg prometheus.Registerer) *RPCMetrics {
	m := &RPCMetrics{seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "prebake_rpc_seconds",
		Help:    "Latency of externalgrpc RPCs as served, by method and gRPC code.",
		Buckets: prometheus.ExponentialBucketsRange(0.00001, 10, 20),
	}, []string{"method", "code"})}
	reg.MustRegister(m.seconds)
	return m
}

// Unary is the interceptor.
func (m *RPCMetrics) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.seconds.WithLabelValues(methodName(info.FullMethod), status.Code(err).String()).Observe(time.Since(start).Seconds())
	return resp, err
}

func methodName(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '/' {
			return full[i+1:]
		}
	}
	return full
}
