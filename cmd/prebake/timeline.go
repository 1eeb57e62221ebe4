package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/nodetimeline"
)

func newTimelineCommand() *cobra.Command {
	var (
		kubeconfig, output, metricsURL string
		o                              nodetimeline.ReadOptions
		timeout                        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "timeline",
		Short: "Where a scale-up's time went: one row per node, from the Pending pod to a pod Running on it",
		Long: `Reads the cluster and prints, for each node of prebake's groups made in the window, the
time between the moments of its way up: pod Pending (the first pod CA's TriggeredScaleUp
Event names) → CA's decision (its ScaledUpGroup Event) → IncreaseSize received → cloud
create accepted → machine running → the node script's phases as the node reported them
(prebaked or not, install skipped or how long it took, the image it booted) → Node
registered → Node Ready → first pod Running; then p50/p90/max of each phase.

Times come from the API objects: prebake's own moments from the Node's prebake.dev/timeline
annotation (prebake serve writes it), the node script's from prebake.dev/bootstrap, CA's
from its Events (kept for the API server's --event-ttl, 1h by default). What can't be known
says why; nothing is filled in. A machine clock that contradicts the cluster's is shown.
kwok's nodes are marked SIMULATED. A node whose machine was a warm-pool standby, resumed
rather than created, shows "warm pool" in a FROM column. Progress goes to stderr.

It needs list on nodes, pods and events (docs/timeline.md has a ClusterRole).
--metrics-url adds prebake's own histograms (every instance since it started).`,
		Example: `  prebake timeline --since 10m
  prebake timeline --group cx-fsn1 -o markdown
  prebake timeline --node cx-fsn1-ab3de -o json
  kubectl -n kube-system port-forward deploy/prebake 8087 &
  prebake timeline --metrics-url http://127.0.0.1:8087/metrics`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case nodetimeline.FormatTable, nodetimeline.FormatJSON, nodetimeline.FormatMarkdown:
			default:
				return &flagError{"--output", output, "table, json or markdown"}
			}
			if o.Since < 0 {
				return &flagError{"--since", o.Since.String(), "a duration >= 0 such as 1h (0: every node)"}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			rc, err := kubeRESTConfig(kubeconfig)
			if err != nil {
				return err
			}
			rc.QPS, rc.Burst = 50, 100
			kube, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			o.Progress = cmd.ErrOrStderr()
			in, err := nodetimeline.Read(ctx, kube, o)
			if err != nil {
				return err
			}
			r := nodetimeline.Build(in)
			if metricsURL != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "prebake timeline: reading %s\n", metricsURL)
				if r.Metrics, err = nodetimeline.ScrapeMetrics(ctx, metricsURL); err != nil {
					return err
				}
			}
			return nodetimeline.Write(cmd.OutOrStdout(), r, output)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default $KUBECONFIG, ~/.kube/config, then in-cluster)")
	f.DurationVar(&o.Since, "since", time.Hour, "report the nodes made in this window (0: every node of prebake's groups)")
	f.StringVar(&o.Node, "node", "", "report only this node, whenever it was made")
	f.StringVar(&o.Group, "group", "", "report only the nodes of this node group (prebake.dev/group)")
	f.StringVar(&o.Cluster, "cluster", "", "report only the nodes of this prebake clusterName (prebake.dev/cluster)")
	f.StringVarP(&output, "output", "o", nodetimeline.FormatTable, "table, json or markdown")
	f.StringVar(&metricsURL, "metrics-url", "", "prebake serve's /metrics URL, to add its histograms (e.g. http://127.0.0.1:8087/metrics)")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "give up reading after this long")
	return cmd
}
