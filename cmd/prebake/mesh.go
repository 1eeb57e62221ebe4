package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prebake-dev/prebake/mesh"
)

func newMeshCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mesh",
		Short: "Join clusters into a Cilium Cluster Mesh",
		Long: `Plan and run the joining of clusters into a Cilium Cluster Mesh.

Two operations that write the same cluster conflict (a Helm release lock, or a lost
update of its peer list), so pairwise connects must run in rounds of disjoint pairs:
"mesh plan" computes the fewest such rounds. "mesh apply" runs them, or better,
writes each cluster's whole peer list once, all in one round. "mesh status" shows
which peers each cluster lacks. See docs/mesh.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newMeshPlanCommand(), newMeshApplyCommand(), newMeshStatusCommand())
	return cmd
}

const maxGenerate = 4096

// meshSource is the set of flags that say which clusters a mesh command works on.
type meshSource struct {
	clustersFile string
	generate     int
	existing     int
}

func (s *meshSource) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.clustersFile, "clusters", "", "clusters file (YAML, see docs/mesh.md)")
	cmd.Flags().IntVar(&s.generate, "generate", 0, "use N synthetic clusters c1..cN instead of a clusters file")
	cmd.Flags().IntVar(&s.existing, "existing", 0, "treat the first M clusters as already meshed with each other")
	cmd.MarkFlagsMutuallyExclusive("clusters", "generate")
	cmd.MarkFlagsOneRequired("clusters", "generate")
}

// graphs returns the cluster names, the current and the wanted connection graphs.
func (s *meshSource) graphs() (names []string, current, wanted *mesh.Graph, err error) {
	switch {
	case s.generate < 0:
		return nil, nil, nil, fmt.Errorf("--generate %d: want a positive number of clusters", s.generate)
	case s.generate > 0:
		// Synthetic clusters are not validated (Cilium ids stop at 511, but a plan is
		// just a graph); the cap only keeps the quadratic pair list in memory.
		if s.generate > maxGenerate {
			return nil, nil, nil, fmt.Errorf("--generate %d: at most %d synthetic clusters", s.generate, maxGenerate)
		}
		names = mesh.GeneratedNames(s.generate)
	default:
		clusters, err := mesh.LoadFile(s.clustersFile)
		if err != nil {
			return nil, nil, nil, err
		}
		names = mesh.Names(clusters)
	}
	if s.existing < 0 || s.existing > len(names) {
		return nil, nil, nil, fmt.Errorf("--existing %d: want 0..%d (the number of clusters)", s.existing, len(names))
	}
	return names, mesh.FullMesh(names[:s.existing]...), mesh.FullMesh(names...), nil
}

func newMeshPlanCommand() *cobra.Command {
	var (
		src    meshSource
		output string
		wide   bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Print the rounds of disjoint pairs that build a full mesh",
		Long: `Prints the schedule of pairwise operations that makes the clusters a full mesh:
rounds in which no cluster takes part twice, so each round can run in parallel.

A full mesh of n clusters takes n-1 rounds for even n and n for odd n (the circle
method, optimal). Adding k clusters to a mesh of m takes m+k-1 rounds when m+k is
even, and at most one more otherwise. No schedule can use fewer rounds than
lowerBound.

Pairwise rounds are what "cilium clustermesh connect" needs. A declarative apply
(one write per cluster) needs a single round; see "prebake mesh apply".`,
		Example: `  # the acceptance figures: 511 rounds, 130305 pairs, lower bound 511
  prebake mesh plan --generate 511 -o json | jq '{roundCount, pairCount, lowerBound}'

  # add one cluster to a mesh of 510: 510 rounds
  prebake mesh plan --generate 511 --existing 510

  # plan a clusters file; its first 4 clusters are already meshed
  prebake mesh plan --clusters clusters.yaml --existing 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			names, current, wanted, err := src.graphs()
			if err != nil {
				return err
			}
			s := mesh.Plan(current, wanted)
			out := cmd.OutOrStdout()
			if output == "json" {
				enc := json.NewEncoder(out)
				return enc.Encode(s)
			}
			return writePlanTable(out, len(names), src.existing, s, wide)
		},
	}
	src.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.Flags().BoolVar(&wide, "wide", false, "table: list every pair of every round (default: the first 4 per round)")
	return cmd
}

func writePlanTable(out io.Writer, n, existing int, s mesh.Schedule, wide bool) error {
	fmt.Fprintf(out, "clusters %d (existing %d)  pairs %d  rounds %d  lowerBound %d  method %s\n\n",
		n, existing, s.PairCount, s.RoundCount, s.LowerBound, s.Method)
	if s.RoundCount == 0 {
		_, err := fmt.Fprintln(out, "nothing to do: the mesh is complete")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUND\tPAIRS\tOPERATIONS")
	for i, r := range s.Rounds {
		shown := r
		if !wide && len(shown) > 4 {
			shown = shown[:4]
		}
		ops := make([]string, len(shown))
		for j, op := range shown {
			ops[j] = op.A + "-" + op.B
			if op.Disconnect {
				ops[j] = op.A + "/" + op.B + "(disconnect)"
			}
		}
		more := ""
		if len(shown) < len(r) {
			more = fmt.Sprintf(" … +%d more", len(r)-len(shown))
		}
		fmt.Fprintf(tw, "%d\t%d\t%s%s\n", i+1, len(r), strings.Join(ops, " "), more)
	}
	return errors.Join(tw.Flush())
}

// ciliumFlags are the flags of the cilium backend, shared by apply and status.
type ciliumFlags struct {
	kubeconfig  string
	namespace   string
	domain      string
	kvstoremesh bool
}

func (f *ciliumFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "cilium backend: kubeconfig with a context per cluster (default $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&f.namespace, "namespace", mesh.DefaultCiliumNamespace, "cilium backend: Cilium's namespace")
	cmd.Flags().StringVar(&f.domain, "domain", mesh.DefaultMeshDomain, "cilium backend: clustermesh.config.domain")
	cmd.Flags().BoolVar(&f.kvstoremesh, "kvstoremesh", true, "cilium backend: clustermesh.apiserver.kvstoremesh.enabled (the chart default) — write cilium-kvstoremesh, and point the agents at the local clustermesh-apiserver")
}

func (f *ciliumFlags) backend(clustersFile string) (*mesh.Cilium, []mesh.Cluster, error) {
	if clustersFile == "" {
		return nil, nil, errors.New("--backend cilium needs --clusters: it needs each cluster's kubeconfig context and clustermeshAPIServer endpoint")
	}
	clusters, err := mesh.LoadFile(clustersFile)
	if err != nil {
		return nil, nil, err
	}
	clients, err := mesh.KubeClients(clusters, f.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	b, err := mesh.NewCilium(clusters, clients, mesh.CiliumOptions{Namespace: f.namespace, Domain: f.domain, KVStoreMesh: f.kvstoremesh})
	return b, clusters, err
}

func newMeshApplyCommand() *cobra.Command {
	var (
		src      meshSource
		cf       ciliumFlags
		backend  string
		mode     string
		parallel int
		attempts int
		dryRun   bool
		opTime   time.Duration
		outDir   string
		command  mesh.Command
	)
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Make the clusters a full mesh through a backend",
		Long: `Makes the clusters a full mesh. It observes the connections the backend reports,
plans only what is missing, and runs it, so running it again after a failure resumes.

Modes:
  declarative  one write per cluster with its whole peer list, all in one round,
               at most --parallel at once (recommended; shared/spec/mesh.md §2.2)
  pairwise     one operation per pair, in rounds of disjoint pairs ("mesh plan"),
               as "cilium clustermesh connect" needs

Backends:
  cilium       server-side-applies, in each cluster, the objects Cilium reads when
               installed with clustermesh.config.enabled=false: the cilium-clustermesh
               and cilium-kvstoremesh Secrets and the clustermesh-remote-users
               ConfigMap (field manager "prebake"). One write per cluster, all in
               parallel; declarative only. Needs --clusters (context and
               clustermeshAPIServer per cluster) and a CA shared by all clusters; it
               refuses, writing nothing, when the CAs differ, when an object would
               exceed 1 MiB, or when Helm renders cilium-clustermesh.
  command      runs --command per pair, round by round, e.g.
               'cilium clustermesh connect --context {a.context} --destination-context {b.context}'.
               Placeholders {a} {b} {a.context} {b.context}. The template is split on
               spaces and run without a shell (no quoting, no injection); --shell runs
               it with sh -c, the placeholders becoming quoted variables. Successes go
               to --journal, which a re-run reads to resume; output goes to --log-dir.
               Pairwise only.
  helm-values  writes <--out>/<cluster>.yaml per cluster, with cluster.name/id and a
               clustermesh.config.clusters dict of its peers, for GitOps. Apply each
               with: helm upgrade cilium cilium/cilium --reuse-values -f <file>.
               Needs --clusters with clustermeshAPIServer endpoints; declarative only.
  simulated    in memory; each operation takes --op-time. For trying and benchmarks.

Clusters removed from the clusters file are dropped from the others' peer lists; the
removed clusters themselves are not written (tear them down, or disable Cluster Mesh).

Failed operations are retried (--attempts, exponential backoff); the rest of the
round continues, and the summary lists what failed.`,
		Example: `  # write the mesh objects into every cluster of clusters.yaml, after showing what changes
  prebake mesh apply --clusters clusters.yaml --backend cilium --dry-run
  prebake mesh apply --clusters clusters.yaml --backend cilium --parallel 32

  # pairwise cilium-cli connects, round by round
  prebake mesh apply --clusters clusters.yaml --backend command \
    --command 'cilium clustermesh connect --context {a.context} --destination-context {b.context}'

  # write one values file per cluster into ./mesh-values
  prebake mesh apply --clusters clusters.yaml --backend helm-values --out mesh-values

  # watch round-scheduled pairwise connects of 12 clusters, 3 of them already meshed
  prebake mesh apply --generate 12 --existing 3 --backend simulated --mode pairwise --op-time 50ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if backend == "command" && !cmd.Flags().Changed("mode") {
				mode = "pairwise"
			}
			if mode != "declarative" && mode != "pairwise" {
				return fmt.Errorf("--mode %q: want declarative or pairwise", mode)
			}
			names, current, wanted, err := src.graphs()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			ctx, stop := signal.NotifyContext(contextOf(cmd), os.Interrupt)
			defer stop()
			e := &mesh.Executor{Parallel: parallel, Attempts: attempts, Progress: out}
			if dryRun {
				e.Parallel = 1 // print the writes in a stable order
			}
			declarativeOnly := func() error {
				if src.existing != 0 {
					return fmt.Errorf("--backend %s observes what is configured; drop --existing", backend)
				}
				if mode != "declarative" {
					return fmt.Errorf("--backend %s writes whole peer lists: use --mode declarative", backend)
				}
				return nil
			}

			var b mesh.DeclarativeBackend
			switch backend {
			case "simulated":
				sim := mesh.NewSimulated(opTime, current)
				if mode == "pairwise" {
					return runPairwise(ctx, out, e, sim, names, src.existing, current, wanted, dryRun, nil)
				}
				b = sim
			case "command":
				if mode != "pairwise" {
					return errors.New("--backend command runs one command per pair: use --mode pairwise")
				}
				if command.Connect == "" {
					return errors.New("--backend command needs --command, e.g. 'cilium clustermesh connect --context {a.context} --destination-context {b.context}'")
				}
				command.Initial = current
				if src.clustersFile != "" {
					clusters, err := mesh.LoadFile(src.clustersFile)
					if err != nil {
						return err
					}
					command.Contexts = map[string]string{}
					for _, c := range clusters {
						command.Contexts[c.Name] = c.Context
					}
				}
				return runPairwise(ctx, out, e, &command, names, src.existing, current, wanted, dryRun, &command)
			case "helm-values":
				if src.clustersFile == "" {
					return errors.New("--backend helm-values needs --clusters: the values need each peer's clustermeshAPIServer endpoint")
				}
				if err := declarativeOnly(); err != nil {
					return err
				}
				clusters, err := mesh.LoadFile(src.clustersFile)
				if err != nil {
					return err
				}
				b = mesh.NewHelmValues(outDir, clusters)
			case "cilium":
				if err := declarativeOnly(); err != nil {
					return err
				}
				cb, _, err := cf.backend(src.clustersFile)
				if err != nil {
					return err
				}
				b = cb
			default:
				return fmt.Errorf("--backend %q: want cilium, command, helm-values or simulated", backend)
			}
			if dryRun {
				b = &mesh.DryRun{Backend: b, Out: out}
			}
			res, err := e.Declarative(ctx, b, names, wanted)
			if werr := mesh.WriteSummary(out, res); werr != nil {
				return werr
			}
			if dryRun {
				fmt.Fprintln(out, "dry-run: nothing was written")
			}
			return err
		},
	}
	src.register(cmd)
	cf.register(cmd)
	cmd.Flags().StringVar(&backend, "backend", "", "cilium, command, helm-values or simulated")
	cmd.Flags().StringVar(&mode, "mode", "declarative", "declarative (one write per cluster) or pairwise (rounds of pairs; the default for --backend command)")
	cmd.Flags().IntVar(&parallel, "parallel", 16, "operations in flight at most (0: a whole round)")
	cmd.Flags().IntVar(&attempts, "attempts", 3, "attempts per operation before it counts as failed")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the writes instead of making them")
	cmd.Flags().DurationVar(&opTime, "op-time", 15*time.Millisecond, "simulated backend: time one operation takes")
	cmd.Flags().StringVar(&outDir, "out", "mesh-values", "helm-values backend: directory of the values files")
	cmd.Flags().StringVar(&command.Connect, "command", "", "command backend: template run per pair to connect; {a} {b} {a.context} {b.context}")
	cmd.Flags().StringVar(&command.Disconnect, "disconnect-command", "", "command backend: template run per pair to disconnect (when clusters leave)")
	cmd.Flags().BoolVar(&command.Shell, "shell", false, "command backend: run the templates with sh -c (placeholders become quoted variables)")
	cmd.Flags().StringVar(&command.Journal, "journal", "mesh-command.journal", "command backend: file recording the pairs done, read back to resume")
	cmd.Flags().StringVar(&command.LogDir, "log-dir", "mesh-command-logs", "command backend: directory of the per-pair output, <a>_<b>.log")
	_ = cmd.MarkFlagRequired("backend")
	return cmd
}

// runPairwise runs (or, with dryRun, prints) the rounds of pairwise operations. cmd, when
// not nil, is used to show the commands a dry run would execute.
func runPairwise(ctx context.Context, out io.Writer, e *mesh.Executor, b mesh.Backend, names []string, existing int,
	current, wanted *mesh.Graph, dryRun bool, cmd *mesh.Command) error {
	if dryRun {
		observed, err := b.Connections(ctx)
		if err != nil {
			return err
		}
		s := mesh.Plan(observed, wanted)
		fmt.Fprintln(out, "dry-run: would run these rounds")
		if err := writePlanTable(out, len(names), existing, s, false); err != nil {
			return err
		}
		if cmd != nil && len(s.Rounds) > 0 {
			argv, err := cmd.Argv(s.Rounds[0][0])
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "dry-run: the first command would be: %q\n", argv)
		}
		return nil
	}
	res, err := e.Run(ctx, b, wanted)
	return errors.Join(mesh.WriteSummary(out, res), err)
}

func contextOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

func newMeshStatusCommand() *cobra.Command {
	var (
		clustersFile string
		backend      string
		outDir       string
		output       string
		cf           ciliumFlags
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show, per cluster, which peers are configured and which are missing",
		Long: `Compares what each cluster in the clusters file is configured with against a full
mesh of all of them: the peers it lists, the ones missing, and the unexpected ones.
It reads configuration only; it does not check that agents are connected.

Backends:
  cilium       reads cilium-clustermesh, cilium-kvstoremesh and clustermesh-remote-users
               in every cluster (through --kubeconfig). A peer counts as configured
               only when all its entries are what "mesh apply --backend cilium" writes;
               an outdated entry (the peer moved its endpoint) shows as missing.
  helm-values  reads the values files in --out.`,
		Example: `  prebake mesh status --clusters clusters.yaml --backend cilium
  prebake mesh status --clusters clusters.yaml --backend cilium -o json | jq '.[] | select(.missing)'
  prebake mesh status --clusters clusters.yaml --backend helm-values --out mesh-values`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			var (
				clusters []mesh.Cluster
				b        mesh.DeclarativeBackend
				err      error
			)
			switch backend {
			case "cilium":
				b, clusters, err = cf.backend(clustersFile)
			case "helm-values":
				clusters, err = mesh.LoadFile(clustersFile)
				b = mesh.NewHelmValues(outDir, clusters)
			default:
				return fmt.Errorf("--backend %q: want cilium or helm-values", backend)
			}
			if err != nil {
				return err
			}
			names := mesh.Names(clusters)
			configured, err := b.Peers(contextOf(cmd))
			if err != nil {
				return err
			}
			statuses := mesh.Status(names, mesh.FullMesh(names...), configured)
			out := cmd.OutOrStdout()
			if output == "json" {
				for i := range statuses {
					if statuses[i].Configured == nil {
						statuses[i].Configured = []string{} // "configured": [] reads better than null
					}
				}
				err = json.NewEncoder(out).Encode(statuses)
			} else {
				err = mesh.WriteStatus(out, statuses)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&clustersFile, "clusters", "", "clusters file (YAML, see docs/mesh.md)")
	cmd.Flags().StringVar(&backend, "backend", "cilium", "where to read the configuration: cilium or helm-values")
	cmd.Flags().StringVar(&outDir, "out", "mesh-values", "helm-values backend: directory of the values files")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cf.register(cmd)
	_ = cmd.MarkFlagRequired("clusters")
	return cmd
}
