package standin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	protos "github.com/prebake-dev/prebake/externalgrpc/proto"
	"github.com/prebake-dev/prebake/providers"
)

// Defaults of Options.
const (
	DefaultInterval   = 200 * time.Millisecond
	DefaultRPCTimeout = 5 * time.Second // CA's grpc_timeout default
	DefaultBackoff    = 5 * time.Minute // CA's --initial-node-group-backoff-duration
)

// Options configure a StandIn.
type Options struct {
	// Conn reaches `prebake serve`. Every call on it is timed (RPCLatencies).
	Conn grpc.ClientConnInterface
	// Kube is the cluster's API: pods and nodes are watched through it.
	Kube kubernetes.Interface
	// Namespace limits the pending pods the stand-in scales for; "" means all.
	Namespace string
	// Interval between loops when nothing triggers one earlier; default DefaultInterval.
	Interval time.Duration
	// RPCTimeout is the deadline of every call; default DefaultRPCTimeout.
	RPCTimeout time.Duration
	// Backoff is how long a group with a creation error is skipped; default DefaultBackoff.
	Backoff time.Duration
	// Expander is CA's --expander value the stand-in applies to its options
	// ("price,least-waste": the price expander's RPCs included). Empty means
	// the stand-in's own rule: most pods, then fewest nodes, then the group
	// listed first.
	Expander string
	// CAEventsNamespace, when set, makes the stand-in write the Events CA writes around a
	// scale-up (caevents.go): ScaledUpGroup on the ConfigMap cluster-autoscaler-status of
	// this namespace, TriggeredScaleUp on the pods. "" writes none.
	CAEventsNamespace string
	// OnEvent, when set, receives every event as it happens. It may be called from several
	// goroutines at once and must not block.
	OnEvent func(Event)
	// Logger defaults to a discarding one.
	Logger *slog.Logger
}

// StandIn is the stand-in for CA. Create it with New; Run drives it, or call Start once and
// then Loop by hand.
type StandIn struct {
	o         Options
	expanders []string // parsed Options.Expander
	client    protos.CloudProviderClient
	rpc       *rpcRecorder
	log       *slog.Logger
	trigger   chan struct{} // one pending "loop now"

	startOnce sync.Once
	startErr  error
	podLister corelisters.PodLister
	nodeList  corelisters.NodeLister

	// loopMu serialises Loop: CA runs one iteration at a time.
	loopMu sync.Mutex

	// mu guards everything below. Informer callbacks and Loop write it.
	mu        sync.Mutex
	loops     int
	pods      map[types.UID]*podSeen
	nodes     map[string]*nodeSeen // by spec.providerID
	instances map[string]*Instance // by id
	order     []string             // instance ids, first listed first
	slots     map[string][]slot    // by group
	backoff   map[string]time.Time // group → end of its backoff

	// caEvents is set by Start when Options.CAEventsNamespace is.
	caEvents *caEvents
}

// New checks o and returns a stopped StandIn.
func New(o Options) (*StandIn, error) {
	if o.Conn == nil || o.Kube == nil {
		return nil, errors.New("standin: Options.Conn (to prebake serve) and Options.Kube (the cluster) are required")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.RPCTimeout <= 0 {
		o.RPCTimeout = DefaultRPCTimeout
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	expanders, err := ParseExpanders(o.Expander)
	if err != nil {
		return nil, fmt.Errorf("standin: Options.Expander: %w", err)
	}
	rec := newRPCRecorder()
	return &StandIn{
		o:         o,
		expanders: expanders,
		client:    protos.NewCloudProviderClient(timedConn{cc: o.Conn, rec: rec}),
		rpc:       rec,
		log:       log.With("component", "ca-standin"),
		trigger:   make(chan struct{}, 1),
		pods:      map[types.UID]*podSeen{},
		nodes:     map[string]*nodeSeen{},
		instances: map[string]*Instance{},
		slots:     map[string][]slot{},
		backoff:   map[string]time.Time{},
	}, nil
}

// Start starts the pod and node watches and returns once their caches have synced. They
// run until ctx ends. Calling Start again returns the first call's result.
func (s *StandIn) Start(ctx context.Context) error {
	s.startOnce.Do(func() { s.startErr = s.start(ctx) })
	return s.startErr
}

func (s *StandIn) start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(s.o.Kube, 0)
	podInf := factory.Core().V1().Pods()
	nodeInf := factory.Core().V1().Nodes()
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.onPodObj(obj) },
		UpdateFunc: func(_, obj any) { s.onPodObj(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				s.onPodDeleted(p.UID)
			}
		},
	}); err != nil {
		return fmt.Errorf("standin: watch pods: %w", err)
	}
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.onNodeObj(obj) },
		UpdateFunc: func(_, obj any) { s.onNodeObj(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				s.onNodeDeleted(n)
			}
		},
	}); err != nil {
		return fmt.Errorf("standin: watch nodes: %w", err)
	}
	s.podLister, s.nodeList = podInf.Lister(), nodeInf.Lister()
	s.startCAEvents(ctx)
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			factory.Shutdown()
			return fmt.Errorf("standin: the %v watch did not sync: %w", typ, context.Cause(ctx))
		}
	}
	// The factory's goroutines stop when ctx ends; Shutdown waits for them.
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	return nil
}

func (s *StandIn) onPodObj(obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		s.onPod(p)
	}
}

func (s *StandIn) onNodeObj(obj any) {
	if n, ok := obj.(*corev1.Node); ok {
		s.onNode(n)
	}
}

// Run starts the watches and loops until ctx ends: every Options.Interval, at once when a
// pod turns unschedulable, and at once again after a loop that scaled up (CA's frequent
// loops). A failed loop (prebake serve unreachable, say) is logged and the next one runs on
// schedule, as CA does.
func (s *StandIn) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(s.o.Interval)
	defer tick.Stop()
	for {
		res, err := s.Loop(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.log.Debug("loop failed", "loop", res.N, "err", err)
		} else if res.ScaleUp != nil {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-s.trigger:
		}
	}
}

// LoopResult says what one loop saw and did.
type LoopResult struct {
	N        int // loop number, from 1
	Started  time.Time
	Duration time.Duration
	// Pending is the number of unschedulable pods in scope; Absorbed of them fit free room
	// on Ready or upcoming nodes.
	Pending, Absorbed int
	// CreateErrors are the instance ids reported with a creation error this loop.
	CreateErrors []string
	// ScaleUp is the IncreaseSize this loop made, if any.
	ScaleUp *ScaleUp
	// Skipped maps a group to why it could not take pending pods.
	Skipped map[string]string
}

// ScaleUp is one IncreaseSize.
type ScaleUp struct {
	Group string
	Delta int
	Pods  int
}

// groupView is one group as this loop sees it.
type groupView struct {
	info      *protos.NodeGroup
	target    int
	instances []*protos.Instance
	failed    []*protos.Instance // creating with an errorInfo
	template  *corev1.Node
}

// listed is one instance of a NodeGroupNodes answer, reduced to what the records need.
type listed struct {
	id    string
	state string
	err   *CreateError
}

// Loop runs one iteration; Start must have returned first. It fails, like CA's, when
// Refresh, NodeGroups, TargetSize or NodeGroupNodes fail; other errors (a failed
// DeleteNodes, a missing template) are logged. Loop calls are serialised.
func (s *StandIn) Loop(ctx context.Context) (res LoopResult, err error) {
	if s.podLister == nil {
		return res, errors.New("standin: Loop before Start: call Start with a context that outlives the loops")
	}
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	s.mu.Lock()
	s.loops++
	res.N = s.loops
	s.mu.Unlock()
	res.Started = time.Now()
	defer func() { res.Duration = time.Since(res.Started) }()

	if _, err := call(ctx, s, s.client.Refresh, &protos.RefreshRequest{}); err != nil {
		return res, fmt.Errorf("Refresh: %w", err)
	}
	ngs, err := call(ctx, s, s.client.NodeGroups, &protos.NodeGroupsRequest{})
	if err != nil {
		return res, fmt.Errorf("NodeGroups: %w", err)
	}
	views := make([]*groupView, 0, len(ngs.GetNodeGroups()))
	var evs []Event
	for _, g := range ngs.GetNodeGroups() {
		v := &groupView{info: g}
		ts, err := call(ctx, s, s.client.NodeGroupTargetSize, &protos.NodeGroupTargetSizeRequest{Id: g.GetId()})
		if err != nil {
			return res, fmt.Errorf("NodeGroupTargetSize %q: %w", g.GetId(), err)
		}
		v.target = int(ts.GetTargetSize())
		listStart := time.Now()
		nodes, err := call(ctx, s, s.client.NodeGroupNodes, &protos.NodeGroupNodesRequest{Id: g.GetId()})
		if err != nil {
			return res, fmt.Errorf("NodeGroupNodes %q: %w", g.GetId(), err)
		}
		v.instances = nodes.GetInstances()
		var ls []listed
		for _, in := range v.instances {
			l := listed{id: in.GetId(), state: in.GetStatus().GetInstanceState().String()}
			if ei := in.GetStatus().GetErrorInfo(); ei.GetErrorCode() != "" && in.GetStatus().GetInstanceState() == protos.InstanceStatus_instanceCreating {
				l.err = &CreateError{Class: ei.GetInstanceErrorClass(), Code: ei.GetErrorCode(), Message: ei.GetErrorMessage()}
				v.failed = append(v.failed, in)
				res.CreateErrors = append(res.CreateErrors, in.GetId())
			}
			ls = append(ls, l)
		}
		evs = append(evs, s.noteListing(g.GetId(), ls, listStart, time.Now(), res.N)...)
		views = append(views, v)
	}
	s.emit(evs...)

	// back the group off and delete the failed instances as fake nodes, every loop
	// until they are gone. They leave this loop's picture at once.
	for _, v := range views {
		if len(v.failed) == 0 {
			continue
		}
		s.backOff(v.info.GetId(), v.failed)
		if err := s.deleteFake(ctx, v.info.GetId(), v.failed); err != nil {
			s.log.Warn("DeleteNodes of failed instances failed; retrying next loop", "group", v.info.GetId(), "err", err)
		}
		v.target -= len(v.failed)
	}

	for _, v := range views {
		t, err := call(ctx, s, s.client.NodeGroupTemplateNodeInfo, &protos.NodeGroupTemplateNodeInfoRequest{Id: v.info.GetId()})
		switch {
		case status.Code(err) == codes.Unimplemented:
			continue // CA can't scale this group from zero
		case err != nil:
			s.log.Warn("NodeGroupTemplateNodeInfo failed; skipping the group this loop", "group", v.info.GetId(), "err", err)
			continue
		case len(t.GetNodeBytes()) == 0:
			s.log.Warn("NodeGroupTemplateNodeInfo answered OK with no bytes (real CA would crash)", "group", v.info.GetId())
			continue
		}
		n := &corev1.Node{}
		if err := n.Unmarshal(t.GetNodeBytes()); err != nil {
			s.log.Warn("template is not a core/v1 Node", "group", v.info.GetId(), "err", err)
			continue
		}
		v.template = n
	}

	pending, existing, byProviderID, err := s.clusterState()
	if err != nil {
		return res, err
	}
	res.Pending = len(pending)
	inputs := make([]groupInput, 0, len(views))
	now := time.Now()
	s.mu.Lock()
	for _, v := range views {
		id := v.info.GetId()
		in := groupInput{ID: id, Template: v.template, Target: v.target, Max: int(v.info.GetMaxSize())}
		ready := 0
		for _, inst := range v.instances {
			if inst.GetStatus().GetInstanceState() == protos.InstanceStatus_instanceDeleting {
				continue
			}
			if n := byProviderID[inst.GetId()]; n != nil && isReady(n) {
				ready++
			}
		}
		in.Upcoming = max(v.target-ready, 0)
		if until, ok := s.backoff[id]; ok && now.Before(until) {
			in.Skip = "backed off until " + until.Format(time.TimeOnly)
		}
		inputs = append(inputs, in)
	}
	s.mu.Unlock()

	p := planScaleUp(pending, existing, inputs)
	res.Absorbed, res.Skipped = len(p.Absorbed), p.Skipped
	if s.expanders != nil && len(p.Options) > 0 {
		templates := map[string]*corev1.Node{}
		for _, v := range views {
			templates[v.info.GetId()] = v.template
		}
		var dropped map[string]string
		p.Best, dropped = s.expand(ctx, p.Options, templates)
		for g, why := range dropped {
			res.Skipped[g] = why
		}
	}
	if p.Best == nil {
		return res, nil
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		var ex []string
		for _, n := range existing {
			q := n.free[corev1.ResourceCPU]
			ex = append(ex, fmt.Sprintf("%s(cpu %s, taints %v)", n.name, q.String(), n.taints))
		}
		var ins []string
		for _, in := range inputs {
			ins = append(ins, fmt.Sprintf("%s(target %d, upcoming %d, skip %q)", in.ID, in.Target, in.Upcoming, in.Skip))
		}
		s.log.Debug("scale-up plan", "loop", res.N, "pending", len(pending), "absorbed", len(p.Absorbed), "existing", ex, "groups", ins,
			"best", p.Best.Group, "nodes", len(p.Best.Nodes))
	}
	var kind string
	for _, v := range views {
		if v.info.GetId() == p.Best.Group && v.template != nil {
			kind = v.template.Labels[providers.LabelImageKind]
		}
	}
	info := &scaleUpInfo{group: p.Best.Group}
	for _, in := range inputs {
		if in.ID == p.Best.Group {
			info.from, info.to, info.max = in.Target, in.Target+len(p.Best.Nodes), in.Max
		}
	}
	if err := s.increase(ctx, p.Best.Group, p.Best.Nodes, kind, res.N, info); err != nil {
		return res, err
	}
	res.ScaleUp = &ScaleUp{Group: p.Best.Group, Delta: len(p.Best.Nodes), Pods: p.Best.Pods}
	return res, nil
}

// clusterState reads the watch caches: the unschedulable pods in scope (oldest first), the
// Ready nodes with their free room, and every Node by providerID.
func (s *StandIn) clusterState() (pending []*corev1.Pod, existing []simNode, byProviderID map[string]*corev1.Node, err error) {
	pods, err := s.podLister.List(labels.Everything())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list pods from the watch cache: %w", err)
	}
	nodes, err := s.nodeList.List(labels.Everything())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list nodes from the watch cache: %w", err)
	}
	bound := map[string][]*corev1.Pod{}
	for _, p := range pods {
		switch {
		case p.Spec.NodeName != "":
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				bound[p.Spec.NodeName] = append(bound[p.Spec.NodeName], p)
			}
		case s.inScope(p.Namespace) && isUnschedulable(p):
			pending = append(pending, p)
		}
	}
	sortPods(pending)
	byProviderID = make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		if n.Spec.ProviderID != "" {
			byProviderID[n.Spec.ProviderID] = n
		}
		if !isReady(n) || n.Spec.Unschedulable || n.DeletionTimestamp != nil {
			continue
		}
		existing = append(existing, simNode{name: n.Name, labels: n.Labels, taints: n.Spec.Taints, free: nodeFree(n, bound[n.Name])})
	}
	return pending, existing, byProviderID, nil
}

func (s *StandIn) backOff(group string, failed []*protos.Instance) {
	now := time.Now()
	s.mu.Lock()
	until, backedOff := s.backoff[group]
	fresh := !backedOff || !now.Before(until)
	if fresh {
		s.backoff[group] = now.Add(s.o.Backoff)
	}
	s.mu.Unlock()
	if fresh {
		ei := failed[0].GetStatus().GetErrorInfo()
		s.emit(Event{At: now, Kind: EventBackoff, Subject: group, Detail: fmt.Sprintf("for %s after %s (class %d %s); trying other groups",
			s.o.Backoff, ei.GetErrorCode(), ei.GetInstanceErrorClass(), className(ei.GetInstanceErrorClass()))})
	}
}

// deleteFake deletes failed instances the way CA does: as fake nodes whose name and
// providerID are the instance id, annotated with the reason.
func (s *StandIn) deleteFake(ctx context.Context, group string, failed []*protos.Instance) error {
	req := &protos.NodeGroupDeleteNodesRequest{Id: group}
	for _, in := range failed {
		req.Nodes = append(req.Nodes, &protos.ExternalGrpcNode{
			ProviderID:  in.GetId(),
			Name:        in.GetId(),
			Annotations: map[string]string{providers.AnnotationFakeNodeReason: "create-error"},
		})
	}
	_, err := call(ctx, s, s.client.NodeGroupDeleteNodes, req)
	if err == nil {
		s.emit(Event{At: time.Now(), Kind: EventDeleteNodes, Subject: group, Detail: fmt.Sprintf("%d fake node(s) of failed creations", len(failed))})
	}
	return err
}

// increase sends IncreaseSize for one new node per entry of nodes and queues the slots that
// the next listing matches with instance ids. With info (a loop's scale-up) it writes CA's
// Events around the call.
func (s *StandIn) increase(ctx context.Context, group string, nodes [][]*corev1.Pod, imageKind string, loop int, info *scaleUpInfo) error {
	delta := len(nodes)
	s.mu.Lock()
	var earliest time.Time
	perNode := make([]time.Time, delta)
	names := make([][]string, delta)
	for i, pods := range nodes {
		for _, p := range pods {
			names[i] = append(names[i], podKey(p))
			if ps := s.pods[p.UID]; ps != nil && !ps.pendingSeen.IsZero() {
				if perNode[i].IsZero() || ps.pendingSeen.Before(perNode[i]) {
					perNode[i] = ps.pendingSeen
				}
			}
		}
		if earliest.IsZero() || !perNode[i].IsZero() && perNode[i].Before(earliest) {
			earliest = perNode[i]
		}
	}
	s.mu.Unlock()

	sent := time.Now()
	if info != nil {
		s.decisionEvent(*info, sent)
	}
	s.emit(Event{At: sent, Kind: EventScaleUp, Subject: group, Detail: fmt.Sprintf("delta %d for %s", delta, joinPods(nodes))})
	_, err := call(ctx, s, s.client.NodeGroupIncreaseSize, &protos.NodeGroupIncreaseSizeRequest{Id: group, Delta: int32(delta)})
	returned := time.Now()
	if info != nil && err == nil {
		var pods []*corev1.Pod
		for _, ps := range nodes {
			pods = append(pods, ps...)
		}
		s.triggerEvents(pods, *info, returned)
	}
	if err != nil {
		// CA backs the group off after a failed IncreaseSize.
		s.mu.Lock()
		s.backoff[group] = returned.Add(s.o.Backoff)
		s.mu.Unlock()
		return fmt.Errorf("NodeGroupIncreaseSize %q +%d: %w", group, delta, err)
	}
	s.mu.Lock()
	for i := range delta {
		s.slots[group] = append(s.slots[group], slot{pods: names[i], pendingSeen: perNode[i], sent: sent, returned: returned, loop: loop, imageKind: imageKind})
	}
	s.mu.Unlock()
	s.log.Info("scaled up", "group", group, "delta", delta, "took", returned.Sub(sent))
	return nil
}

// IncreaseSize asks for delta nodes in group outside any loop, the way a test sets up
// nodes without pods; their timelines have no pod times.
func (s *StandIn) IncreaseSize(ctx context.Context, group string, delta int) error {
	kind := ""
	if t, err := call(ctx, s, s.client.NodeGroupTemplateNodeInfo, &protos.NodeGroupTemplateNodeInfoRequest{Id: group}); err == nil {
		n := &corev1.Node{}
		if n.Unmarshal(t.GetNodeBytes()) == nil {
			kind = n.Labels[providers.LabelImageKind]
		}
	}
	return s.increase(ctx, group, make([][]*corev1.Pod, delta), kind, 0, nil)
}

// DeleteNodes scales group down by exactly these nodes, as CA's scale-down does after it
// drained them: the nodes go on the wire with providerID, name, labels and annotations.
func (s *StandIn) DeleteNodes(ctx context.Context, group string, nodes ...*corev1.Node) error {
	req := &protos.NodeGroupDeleteNodesRequest{Id: group}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		req.Nodes = append(req.Nodes, &protos.ExternalGrpcNode{
			ProviderID: n.Spec.ProviderID, Name: n.Name, Labels: n.Labels, Annotations: n.Annotations,
		})
		names = append(names, n.Name)
	}
	if _, err := call(ctx, s, s.client.NodeGroupDeleteNodes, req); err != nil {
		return fmt.Errorf("NodeGroupDeleteNodes %q %v: %w", group, names, err)
	}
	s.emit(Event{At: time.Now(), Kind: EventDeleteNodes, Subject: group, Detail: fmt.Sprintf("%v", names)})
	return nil
}

// Client is the timed gRPC client the stand-in uses, for checks the tests make themselves
// (TargetSize after a scale-down, say). Its calls count in RPCLatencies.
func (s *StandIn) Client() protos.CloudProviderClient { return s.client }

// Loops is the number of loops started so far.
func (s *StandIn) Loops() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loops
}

// call makes one RPC with the stand-in's per-call deadline, like CA's grpc_timeout.
func call[Req, Resp any](ctx context.Context, s *StandIn, fn func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.RPCTimeout)
	defer cancel()
	return fn(ctx, req)
}
