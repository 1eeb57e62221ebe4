package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

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

// meshSource is the set of flags that say which clusters a mesh command works on.
type meshSource struct {
	clustersFile string
	idsFile      string
	generate     int
	maxConnected int
	existing     int

	clusters []mesh.Cluster // the clusters file, with its recorded ids; nil for --generate
}

func (s *meshSource) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.clustersFile, "clusters", "", "clusters file (YAML, see docs/mesh.md)")
	cmd.Flags().StringVar(&s.idsFile, "ids", "", "file recording the cluster ids allocated so far, so an id never changes (default: beside --clusters, clusters.yaml → clusters.ids.yaml)")
	cmd.Flags().IntVar(&s.generate, "generate", 0, "use N synthetic clusters c1..cN (ids 1..N) instead of a clusters file")
	cmd.Flags().IntVar(&s.maxConnected, "max-connected-clusters", mesh.MaxConnectedClusters255, "--generate: the clustermesh.maxConnectedClusters the synthetic clusters were installed with (255 or 511)")
	cmd.Flags().IntVar(&s.existing, "existing", 0, "treat the first M clusters as already meshed with each other")
	cmd.MarkFlagsMutuallyExclusive("clusters", "generate")
	cmd.MarkFlagsOneRequired("clusters", "generate")
}

// graphs loads the clusters (recording newly allocated ids, reported on log) and returns
// their names, the current and the wanted connection graphs.
func (s *meshSource) graphs(log io.Writer) (names []string, current, wanted *mesh.Graph, err error) {
	switch {
	case s.generate < 0:
		return nil, nil, nil, fmt.Errorf("--generate %d: want a positive number of clusters", s.generate)
	case s.generate > 0:
		if s.maxConnected != mesh.MaxConnectedClusters255 && s.maxConnected != mesh.MaxConnectedClusters511 {
			return nil, nil, nil, fmt.Errorf("--max-connected-clusters %d: Cilium accepts 255 or 511", s.maxConnected)
		}
		if s.generate > mesh.MaxConnectedClusters511 {
			return nil, nil, nil, fmt.Errorf("--generate %d: Cilium meshes at most %d clusters (maxConnectedClusters 511, cluster ids 1..511)", s.generate, mesh.MaxConnectedClusters511)
		}
		if s.generate > mesh.MaxConnectedClusters255 && s.maxConnected != mesh.MaxConnectedClusters511 {
			return nil, nil, nil, fmt.Errorf("--generate %d: more than %d clusters need maxConnectedClusters 511 (the Helm value clustermesh.maxConnectedClusters=511, chosen at install time: it cannot be migrated, and halves the cluster-local identities to 32,767); the synthetic clusters have %d: add --max-connected-clusters 511", s.generate, mesh.MaxConnectedClusters255, s.maxConnected)
		}
		names = mesh.GeneratedNames(s.generate)
	default:
		ids := s.idsFile
		if ids == "" {
			ids = mesh.DefaultIDsPath(s.clustersFile)
		}
		clusters, allocated, err := mesh.LoadFileIDs(s.clustersFile, ids)
		if err != nil {
			return nil, nil, nil, err
		}
		if len(allocated) > 0 {
			fmt.Fprintf(log, "allocated cluster ids for %s, recorded in %s: they never change (install each cluster with its id)\n", strings.Join(allocated, ", "), ids)
		}
		s.clusters = clusters
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
		mode   string
		wide   bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Print the rounds of disjoint pairs (or the declarative writes) that build a full mesh",
		Long: `Prints the schedule of pairwise operations that makes the clusters a full mesh:
rounds in which no cluster takes part twice, so each round can run in parallel.

A full mesh of n clusters takes n-1 rounds for even n and n for odd n (the circle
method, optimal). Adding k clusters to a mesh of m takes m+k-1 rounds when m+k is
even, and at most one more otherwise. No schedule can use fewer rounds than
lowerBound.

Pairwise rounds are what "cilium clustermesh connect" needs. A declarative apply
(one write per cluster) needs a single round: --mode declarative prints it.

Scale rules, checked before planning: Cilium meshes at most 255 clusters with the
default clustermesh.maxConnectedClusters=255 and 511 with 511, which is chosen at
install time and cannot be changed later. Past 255 clusters the plan refuses, naming
the clusters installed without maxConnectedClusters: 511 (for --generate:
--max-connected-clusters). Ids the clusters file leaves out are allocated once and
recorded in the ids file (--ids); a cluster keeps its id when others come or go, and
the id of a cluster that left is not given to another. See docs/mesh.md.`,
		Example: `  # the acceptance figures: 511 rounds, 130305 pairs, lower bound 511
  prebake mesh plan --generate 511 -o json | jq '{roundCount, pairCount, lowerBound}'

  # add one cluster to a mesh of 510: 510 rounds
  prebake mesh plan --generate 511 --existing 510

  # plan a clusters file; its first 4 clusters are already meshed
  prebake mesh plan --clusters clusters.yaml --existing 4

  # 300 clusters need maxConnectedClusters 511: 299 rounds, or one declarative round
  prebake mesh plan --generate 300 --max-connected-clusters 511
  prebake mesh plan --generate 300 --max-connected-clusters 511 --mode declarative`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			if mode != "pairwise" && mode != "declarative" {
				return fmt.Errorf("--mode %q: want pairwise or declarative", mode)
			}
			names, current, wanted, err := src.graphs(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if mode == "declarative" {
				return writeDeclarativePlan(out, output, names, current, wanted)
			}
			s := mesh.Plan(current, wanted)
			if output == "json" {
				enc := json.NewEncoder(out)
				return enc.Encode(s)
			}
			return writePlanTable(out, len(names), src.existing, s, wide)
		},
	}
	src.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.Flags().StringVar(&mode, "mode", "pairwise", "pairwise (rounds of disjoint pairs) or declarative (one write per cluster, one round)")
	cmd.Flags().BoolVar(&wide, "wide", false, "table: list every pair of every round (default: the first 4 per round)")
	return cmd
}

// declarativePlan is the JSON of "mesh plan --mode declarative".
type declarativePlan struct {
	Mode       string            `json:"mode"`
	RoundCount int               `json:"roundCount"`
	WriteCount int               `json:"writeCount"`
	PairCount  int               `json:"pairCount"`
	Writes     []declarativeJoin `json:"writes"`
}

type declarativeJoin struct {
	Cluster string `json:"cluster"`
	Peers   int    `json:"peers"`
}

// writeDeclarativePlan prints the one round of a declarative apply: every cluster whose
// peer list changes is written once with its whole list (those leaving the mesh are not
// written).
func writeDeclarativePlan(out io.Writer, output string, names []string, current, wanted *mesh.Graph) error {
	have, want := current.Peers(), wanted.Peers()
	p := declarativePlan{Mode: "declarative", Writes: []declarativeJoin{}, PairCount: mesh.Plan(current, wanted).PairCount}
	for _, n := range names {
		if !slices.Equal(have[n], want[n]) {
			p.Writes = append(p.Writes, declarativeJoin{Cluster: n, Peers: len(want[n])})
		}
	}
	p.WriteCount = len(p.Writes)
	if p.WriteCount > 0 {
		p.RoundCount = 1
	}
	if output == "json" {
		return json.NewEncoder(out).Encode(p)
	}
	fmt.Fprintf(out, "clusters %d  writes %d  rounds %d  pairs %d  method declarative\n", len(names), p.WriteCount, p.RoundCount, p.PairCount)
	if p.WriteCount == 0 {
		_, err := fmt.Fprintln(out, "nothing to do: the mesh is complete")
		return err
	}
	shown := p.Writes
	if len(shown) > 8 {
		shown = shown[:8]
	}
	parts := make([]string, len(shown))
	for i, w := range shown {
		parts[i] = fmt.Sprintf("%s(%d peers)", w.Cluster, w.Peers)
	}
	more := ""
	if len(shown) < len(p.Writes) {
		more = fmt.Sprintf(" … +%d more", len(p.Writes)-len(shown))
	}
	_, err := fmt.Fprintf(out, "round 1: %s%s\n", strings.Join(parts, " "), more)
	return err
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

// errCiliumNeedsClusters is what --backend cilium without --clusters says.
var errCiliumNeedsClusters = errors.New("--backend cilium needs --clusters: it needs each cluster's kubeconfig context and clustermeshAPIServer endpoint")

// backend returns the cilium backend and the clusters' REST configs (for the status reader).
func (f *ciliumFlags) backend(clusters []mesh.Cluster) (*mesh.Cilium, map[string]*rest.Config, error) {
	configs, err := mesh.KubeConfigs(clusters, f.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	clients, err := mesh.ClientsFor(clusters, configs)
	if err != nil {
		return nil, nil, err
	}
	b, err := mesh.NewCilium(clusters, clients, mesh.CiliumOptions{Namespace: f.namespace, Domain: f.domain, KVStoreMesh: f.kvstoremesh})
	return b, configs, err
}

// statusReader is the built-in status reader of the cilium backend.
func (f *ciliumFlags) statusReader(configs map[string]*rest.Config) (mesh.StatusReader, error) {
	return mesh.NewExecStatus(configs, mesh.ExecStatusOptions{Namespace: f.namespace, KVStoreMesh: f.kvstoremesh})
}

var errNoWaitStatusCommand = errors.New("--no-wait and --status-command contradict each other: drop one")

// joinWait decides how a declarative join is confirmed: by --status-command; else, for the
// cilium backend, by Cilium's status read through pods/exec (builtin); else not at all
// (--no-wait, and the backends that only write files). note says which, for the log.
func joinWait(backend string, noWait bool, statusCmd *mesh.StatusCommand, kvstoremesh bool,
	builtin func() (mesh.StatusReader, error)) (r mesh.StatusReader, note string, err error) {
	switch {
	case noWait && statusCmd.Template != "":
		return nil, "", errNoWaitStatusCommand
	case statusCmd.Template != "":
		return statusCmd, "waiting for each join: --status-command, every --poll, at most --join-timeout per cluster", nil
	case noWait:
		return nil, "--no-wait: a join counts as done once written; nothing checks that Cilium connected the peers " +
			"(the journal records them as unverified; run again without --no-wait to wait for them)", nil
	case backend == "cilium":
		r, err := builtin()
		if err != nil {
			return nil, "", err
		}
		what := "cilium-dbg status in one agent"
		if kvstoremesh {
			what += " and kvstoremesh-dbg status in every clustermesh-apiserver pod"
		}
		return r, "waiting for each join: " + what + " (pods/exec), every --poll, at most --join-timeout per cluster", nil
	}
	return nil, "", nil
}

// contexts maps the clusters' names to their kubeconfig contexts.
func contexts(clusters []mesh.Cluster) map[string]string {
	out := make(map[string]string, len(clusters))
	for _, c := range clusters {
		out[c.Name] = c.Context
	}
	return out
}

// defaultParallel bounds the joins in flight: far below a large mesh's size, because a
// cluster that joins makes its KVStoreMesh (or every agent) connect to all its peers at
// once, and every peer's clustermesh-apiserver serves its initial sync (docs/mesh.md,
// "Scale rules").
const defaultParallel = 8

func newMeshApplyCommand() *cobra.Command {
	var (
		src         meshSource
		cf          ciliumFlags
		backend     string
		mode        string
		parallel    int
		attempts    int
		dryRun      bool
		opTime      time.Duration
		outDir      string
		journal     string
		statusCmd   mesh.StatusCommand
		noWait      bool
		joinTimeout time.Duration
		poll        time.Duration
		command     mesh.Command
	)
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Make the clusters a full mesh through a backend",
		Long: `Makes the clusters a full mesh. It observes the connections the backend reports,
plans only what is missing, and runs it, so running it again after a failure resumes.

Modes:
  declarative  one join per cluster: a write of its whole peer list, then a wait
               until Cilium in that cluster reports every peer ready (see "Waiting
               for Cilium"). All in one round, at most --parallel joins in flight
               (recommended; see docs/mesh.md)
  pairwise     one operation per pair, in rounds of disjoint pairs ("mesh plan"),
               as "cilium clustermesh connect" needs

Backends:
  cilium       server-side-applies, in each cluster, the objects Cilium reads when
               installed with clustermesh.config.enabled=false: the cilium-clustermesh
               and cilium-kvstoremesh Secrets and the clustermesh-remote-users
               ConfigMap (field manager "prebake"). Declarative only. Needs --clusters
               (context and clustermeshAPIServer per cluster) and a CA shared by all
               clusters; it refuses, writing nothing, when the CAs differ, when an
               object would exceed 1 MiB, or when Helm renders cilium-clustermesh.
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

Waiting for Cilium (declarative): with --backend cilium, a join is done only once
Cilium in that cluster says so. By default prebake reads it through the Kubernetes API
(pods/exec), as these commands would:
  kubectl -n <namespace> exec ds/cilium -c cilium-agent -- cilium-dbg status -o json
  kubectl -n <namespace> exec <pod> -c kvstoremesh -- clustermesh-apiserver kvstoremesh-dbg status -o json
the first in one agent pod, the second (with --kvstoremesh) in every
clustermesh-apiserver pod. The kubeconfig user needs, in Cilium's namespace: create
on pods/exec (and get, for API servers before Kubernetes 1.35), get on daemonsets and
deployments, list on pods. A join is done when the agent lists every peer ready and,
with KVStoreMesh, every KVStoreMesh lists it ready and synchronised. It is read every
--poll until --join-timeout, which fails that join only. A remote that flaps only
prolongs the waits that need it: nothing is written again.

--status-command replaces the built-in reader (any backend): a command run per cluster
({cluster}, {context}; no shell unless --status-shell) printing that same JSON, e.g.
to ask every agent. --no-wait counts a join as done once written: nothing checks that
Cilium connected the peers, the log says so, and the journal records those joins as
"unverified", so a later run without --no-wait waits for them. The helm-values and
simulated backends do not wait unless given --status-command.

Progress (declarative): each join is appended to --journal as it begins and ends. A
re-run skips the clusters whose join it records as done for the same peers (and whose
objects still list them), waits for those written but not confirmed, and writes the
rest: a killed apply resumes without redoing finished joins.

Clusters removed from the clusters file are dropped from the others' peer lists; the
removed clusters themselves are not written (tear them down, or disable Cluster Mesh).

Failed writes are retried (--attempts, exponential backoff); the rest of the round
continues, and the summary lists what failed.`,
		Example: `  # write the mesh objects into every cluster of clusters.yaml, after showing what changes;
  # each join counts once Cilium in that cluster reports its peers ready
  prebake mesh apply --clusters clusters.yaml --backend cilium --dry-run
  prebake mesh apply --clusters clusters.yaml --backend cilium --parallel 8

  # write only; nothing verifies the joins (a later run without --no-wait waits for them)
  prebake mesh apply --clusters clusters.yaml --backend cilium --no-wait

  # read the status with your own command instead, here from every agent
  prebake mesh apply --clusters clusters.yaml --backend cilium --status-shell --status-command \
    'for p in $(kubectl --context {context} -n kube-system get pod -l k8s-app=cilium -o name); do
       kubectl --context {context} -n kube-system exec $p -c cilium-agent -- cilium-dbg status -o json || exit 1; done &&
     kubectl --context {context} -n kube-system exec deploy/clustermesh-apiserver -c kvstoremesh -- clustermesh-apiserver kvstoremesh-dbg status -o json'

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
			if parallel < 0 {
				return fmt.Errorf("--parallel %d: want 1 or more (0: a whole round at once)", parallel)
			}
			if statusCmd.Template != "" && mode != "declarative" {
				return errors.New("--status-command waits for declarative joins: use --mode declarative")
			}
			if noWait && statusCmd.Template != "" {
				return errNoWaitStatusCommand
			}
			switch backend {
			case "cilium", "helm-values":
				if src.clustersFile == "" {
					if backend == "cilium" {
						return errCiliumNeedsClusters
					}
					return errors.New("--backend helm-values needs --clusters: the values need each peer's clustermeshAPIServer endpoint")
				}
			case "command":
				if mode != "pairwise" {
					return errors.New("--backend command runs one command per pair: use --mode pairwise")
				}
				if command.Connect == "" {
					return errors.New("--backend command needs --command, e.g. 'cilium clustermesh connect --context {a.context} --destination-context {b.context}'")
				}
			case "simulated":
			default:
				return fmt.Errorf("--backend %q: want cilium, command, helm-values or simulated", backend)
			}
			names, current, wanted, err := src.graphs(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			ctx, stop := signal.NotifyContext(contextOf(cmd), os.Interrupt)
			defer stop()
			e := &mesh.Executor{Parallel: parallel, Attempts: attempts, Progress: out, JoinTimeout: joinTimeout, PollInterval: poll}
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

			var (
				b       mesh.DeclarativeBackend
				builtin func() (mesh.StatusReader, error) // the cilium backend's status reader
			)
			switch backend {
			case "simulated":
				sim := mesh.NewSimulated(opTime, current)
				if mode == "pairwise" {
					return runPairwise(ctx, out, e, sim, names, src.existing, current, wanted, dryRun, nil)
				}
				b = sim
			case "command":
				command.Initial = current
				command.Journal = journal
				if command.Journal == "" {
					command.Journal = "mesh-command.journal"
				}
				command.Contexts = contexts(src.clusters)
				return runPairwise(ctx, out, e, &command, names, src.existing, current, wanted, dryRun, &command)
			case "helm-values":
				if err := declarativeOnly(); err != nil {
					return err
				}
				b = mesh.NewHelmValues(outDir, src.clusters)
			case "cilium":
				if err := declarativeOnly(); err != nil {
					return err
				}
				cb, configs, err := cf.backend(src.clusters)
				if err != nil {
					return err
				}
				b = cb
				e.KVStoreMesh = cf.kvstoremesh
				builtin = func() (mesh.StatusReader, error) { return cf.statusReader(configs) }
			}
			if !dryRun {
				statusCmd.Contexts = contexts(src.clusters)
				r, note, err := joinWait(backend, noWait, &statusCmd, cf.kvstoremesh, builtin)
				if err != nil {
					return err
				}
				e.Status = r
				if note != "" {
					fmt.Fprintln(out, note)
				}
			}
			if dryRun {
				b = &mesh.DryRun{Backend: b, Out: out}
			} else {
				if journal == "" && src.clustersFile != "" {
					journal = strings.TrimSuffix(src.clustersFile, filepath.Ext(src.clustersFile)) + ".journal"
				}
				if journal != "" {
					j, err := mesh.OpenJournal(journal)
					if err != nil {
						return err
					}
					defer j.Close()
					e.Journal = j
				}
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
	cmd.Flags().StringVar(&mode, "mode", "declarative", "declarative (one join per cluster) or pairwise (rounds of pairs; the default for --backend command)")
	cmd.Flags().IntVar(&parallel, "parallel", defaultParallel, "joins (declarative) or operations (pairwise) in flight at most; 0: a whole round at once")
	cmd.Flags().IntVar(&attempts, "attempts", 3, "attempts per write or operation before it counts as failed")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the writes instead of making them")
	cmd.Flags().StringVar(&journal, "journal", "", "file recording the progress, read back to resume (default: declarative with --clusters: beside it, clusters.yaml → clusters.journal; command backend: mesh-command.journal)")
	cmd.Flags().StringVar(&statusCmd.Template, "status-command", "", "declarative: instead of the cilium backend's built-in reader (pods/exec), a command run per cluster ({cluster} {context}) printing Cilium's status JSON (cilium-dbg status -o json, kvstoremesh-dbg status -o json); a join is done once it shows every peer ready")
	cmd.Flags().BoolVar(&statusCmd.Shell, "status-shell", false, "run --status-command with sh -c ({cluster} and {context} become \"$MESH_CLUSTER\" and \"$MESH_CONTEXT\")")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "declarative: count a join as done once written, without reading Cilium's status (the journal records it as unverified)")
	cmd.Flags().DurationVar(&joinTimeout, "join-timeout", 10*time.Minute, "declarative joins that wait (cilium, or --status-command): how long one cluster may take to report its peers ready; past it that join fails")
	cmd.Flags().DurationVar(&poll, "poll", 5*time.Second, "declarative joins that wait: time between two status reads of a cluster")
	cmd.Flags().DurationVar(&opTime, "op-time", 15*time.Millisecond, "simulated backend: time one operation takes")
	cmd.Flags().StringVar(&outDir, "out", "mesh-values", "helm-values backend: directory of the values files")
	cmd.Flags().StringVar(&command.Connect, "command", "", "command backend: template run per pair to connect; {a} {b} {a.context} {b.context}")
	cmd.Flags().StringVar(&command.Disconnect, "disconnect-command", "", "command backend: template run per pair to disconnect (when clusters leave)")
	cmd.Flags().BoolVar(&command.Shell, "shell", false, "command backend: run the templates with sh -c (placeholders become quoted variables)")
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
				if clustersFile == "" {
					return errCiliumNeedsClusters
				}
				if clusters, err = mesh.LoadFile(clustersFile); err == nil {
					b, _, err = cf.backend(clusters)
				}
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
