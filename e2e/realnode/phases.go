package realnode

import (
	"regexp"
	"strconv"
	"time"

	"github.com/prebake-dev/prebake/e2e/standin"
	"github.com/prebake-dev/prebake/e2e/timeline"
)

// Measured is one phase of one node's scale-up, measured.
type Measured struct {
	Phase, From, To, Source string
	D                       time.Duration // timeline.Unknown: not measured (the node did not get there)
}

// Unmeasured reports whether m was not measured. A negative duration is measured: its "to"
// was seen before its "from" (a pod Running before the stand-in saw its Node Ready, as CA
// counts Ready: without the not-ready taint).
func (m Measured) Unmeasured() bool { return m.D == timeline.Unknown }

// Sources of the figures.
const (
	srcStandin  = "stand-in's clock (watch events, RPC returns)"
	srcEngine   = "Engine API State.StartedAt vs the stand-in's IncreaseSize return (one host clock)"
	srcSystemd  = "node: systemd UserspaceTimestampMonotonic"
	srcCloud    = "node: /run/cloud-init/status.json"
	srcScript   = "node: bootstrap status file (" + "/var/lib/prebake/status.json" + ")"
	srcAPI      = "API: Node with the listed providerID seen by the stand-in's watch"
	srcRunning  = "API: pod Running seen by the stand-in's watch"
	srcEndToEnd = "stand-in: pod seen Unschedulable → pod Running"
	srcBound    = "stand-in's pod watch: spec.nodeName first seen → Running first seen"
)

// Measure lays out one node's scale-up, every figure measured: the stand-in's records (its
// clock, on this host) and what the node says about itself (Boot).
func Measure(in standin.Instance, b Boot) []Measured {
	var out []Measured
	add := func(phase, from, to, src string, d time.Duration) {
		out = append(out, Measured{phase, from, to, src, d})
	}
	add("stand-in reaction", "pod seen Unschedulable", "IncreaseSize sent", srcStandin, timeline.Between(in.PodPendingSeen, in.IncreaseSent))
	add("IncreaseSize", "sent", "returned", srcStandin, timeline.Between(in.IncreaseSent, in.IncreaseReturned))
	add("to container start", "IncreaseSize returned", "container started", srcEngine, timeline.Between(in.IncreaseReturned, b.ContainerStarted))
	add("systemd", "container started", "systemd PID 1 started", srcSystemd, timeline.Between(b.ContainerStarted, b.SystemdStarted))
	final := time.Time{}
	if st, ok := b.CloudInit["modules-final"]; ok {
		final = st[0]
	}
	add("cloud-init", "systemd started", "cloud-init final stage (runcmd) started", srcCloud, timeline.Between(b.SystemdStarted, final))
	add("to node script", "cloud-init final stage started", "node script started", srcScript, timeline.Between(final, b.ScriptStarted))
	for _, p := range b.Status.Phases {
		add("script: "+p.Name, "phase start", "phase end", srcScript, p.Duration())
	}
	add("to registration", "container started", "Node registered", srcAPI, timeline.Between(b.ContainerStarted, in.Registered))
	add("Ready", "Node registered", "Node Ready", srcStandin, timeline.Between(in.Registered, in.Ready))
	add("pod Running", "Node Ready", "pod Running", srcRunning, timeline.Between(in.Ready, in.PodRunning))
	add("on the node", "pod bound", "pod Running", srcBound, timeline.Between(in.PodBound, in.PodRunning))
	add("end to end", "pod seen Unschedulable", "pod Running", srcEndToEnd, timeline.Between(in.PodPendingSeen, in.PodRunning))
	return out
}

// Compare puts runs of Measure side by side, phases in the order they first appear.
func Compare(title string, columns []string, runs ...[]Measured) timeline.Comparison {
	c := timeline.Comparison{Title: title, Columns: columns}
	index := map[string]int{}
	for col, run := range runs {
		for _, m := range run {
			i, ok := index[m.Phase]
			if !ok {
				i = len(c.Rows)
				index[m.Phase] = i
				c.Rows = append(c.Rows, timeline.Row{Phase: m.Phase, From: m.From, To: m.To, Source: m.Source, Values: make([]time.Duration, len(runs))})
				for j := range c.Rows[i].Values {
					c.Rows[i].Values[j] = -1
				}
			}
			c.Rows[i].Values[col] = m.D
		}
	}
	return c
}

// pulledRE matches kubelet's Pulled event for a pull it made (kubernetes
// pkg/kubelet/images/image_manager.go, the duration printed by time.Duration.String):
// `Successfully pulled image "ref" in 1.2s (1.2s including waiting). Image size: 123 bytes.`
var pulledRE = regexp.MustCompile(`Successfully pulled image "[^"]+" in ([0-9][0-9.hmsµn]*) .*Image size: ([0-9]+) bytes`)

// kubeletPull is the pull's duration and image size in kubelet's Pulled event messages.
func kubeletPull(events string) (time.Duration, int64, bool) {
	m := pulledRE.FindStringSubmatch(events)
	if m == nil {
		return -1, 0, false
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return -1, 0, false
	}
	size, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return -1, 0, false
	}
	return d, size, true
}
