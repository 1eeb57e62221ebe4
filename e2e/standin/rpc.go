package standin

import (
	"context"
	"maps"
	"path"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// timedConn measures every unary call on the client side: what CA would wait for, network
// and TLS included.
type timedConn struct {
	cc  grpc.ClientConnInterface
	rec *rpcRecorder
}

func (t timedConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	start := time.Now()
	err := t.cc.Invoke(ctx, method, args, reply, opts...)
	t.rec.add(path.Base(method), time.Since(start), err)
	return err
}

func (t timedConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return t.cc.NewStream(ctx, desc, method, opts...)
}

// rpcRecorder keeps the latency of every call by method.
type rpcRecorder struct {
	mu        sync.Mutex // guards the maps
	durations map[string][]time.Duration
	errors    map[string]map[string]int // method → gRPC code → count
}

func newRPCRecorder() *rpcRecorder {
	return &rpcRecorder{durations: map[string][]time.Duration{}, errors: map[string]map[string]int{}}
}

func (r *rpcRecorder) add(method string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.durations[method] = append(r.durations[method], d)
	if err != nil {
		if r.errors[method] == nil {
			r.errors[method] = map[string]int{}
		}
		r.errors[method][status.Code(err).String()]++
	}
}

// RPCLatencies returns the client-side latency of every RPC made so far, by method name
// (NodeGroups, NodeGroupIncreaseSize, …), failed calls included.
func (s *StandIn) RPCLatencies() map[string][]time.Duration {
	s.rpc.mu.Lock()
	defer s.rpc.mu.Unlock()
	out := make(map[string][]time.Duration, len(s.rpc.durations))
	for m, ds := range s.rpc.durations {
		out[m] = slices.Clone(ds)
	}
	return out
}

// RPCErrors returns the failed RPCs so far: method → gRPC code → count.
func (s *StandIn) RPCErrors() map[string]map[string]int {
	s.rpc.mu.Lock()
	defer s.rpc.mu.Unlock()
	out := make(map[string]map[string]int, len(s.rpc.errors))
	for m, codes := range s.rpc.errors {
		out[m] = maps.Clone(codes)
	}
	return out
}
