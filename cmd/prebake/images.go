package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"k8s.io/client-go/kubernetes"

	"github.com/prebake-dev/prebake/imagecatalog"
)

func newImagesCommand() *cobra.Command { return newImagesCommandWith(imagesDeps{}) }

// imagesDeps are what tests put in place of the real world; the zero value
// is the real one.
type imagesDeps struct {
	// kube stands in for the workload cluster of the --canary-group canary.
	kube kubernetes.Interface
}

func newImagesCommandWith(deps imagesDeps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Build, publish and manage the catalog of prebaked node images",
		Long: `Work on the image catalog: immutable, named images and the channels
(stable, candidate, ...) that point to them, per os, k8s minor, arch, provider and
location. The catalog is a YAML document in a file or a ConfigMap (--catalog) that
every writer updates with compare-and-swap, so two writers never lose each other's
changes. Commands that talk to the cloud (build, refresh, publish, sync, gc) read
the provider from --config, the ProviderConfig that 'prebake serve' uses; promote,
rollback and deprecate also push the catalog's labels to the cloud when --config is
given. Every command that changes something has --dry-run. See docs/images.md.`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().String("catalog", "images.yaml", "image catalog: a file path, file://PATH or configmap://NAMESPACE/NAME")
	cmd.PersistentFlags().String("kubeconfig", "", "kubeconfig for a configmap:// catalog (default $KUBECONFIG, then in-cluster)")
	cmd.PersistentFlags().String("config", "", "ProviderConfig file whose provider block gives the image API (as for prebake serve)")
	cmd.PersistentFlags().StringP("output", "o", "table", "output format: table, json or yaml")
	cmd.AddCommand(newImagesListCommand(), newImagesShowCommand(), newImagesResolveCommand(),
		newImagesPromoteCommand(), newImagesRollbackCommand(), newImagesGCCommand(),
		newImagesPublishCommand(), newImagesDeprecateCommand(), newImagesSyncCommand(),
		newImagesBuildCommand(), newImagesRefreshCommand(deps))
	return cmd
}

// imagesEnv is what every images subcommand reads from the shared flags.
type imagesEnv struct {
	store  imagecatalog.Store
	output string
	out    io.Writer
	// progress receives build and refresh progress: stderr, so -o json
	// stays parseable.
	progress io.Writer
}

func imagesEnvOf(cmd *cobra.Command) (imagesEnv, error) {
	catalog, _ := cmd.Flags().GetString("catalog")
	kubeconfig, _ := cmd.Flags().GetString("kubeconfig")
	output, _ := cmd.Flags().GetString("output")
	switch output {
	case "table", "json", "yaml":
	default:
		return imagesEnv{}, fmt.Errorf("-o %q: want table, json or yaml", output)
	}
	store, err := openStore(catalog, kubeconfig)
	if err != nil {
		return imagesEnv{}, err
	}
	return imagesEnv{store: store, output: output, out: cmd.OutOrStdout(), progress: cmd.ErrOrStderr()}, nil
}

// loadCatalog is imagesEnvOf plus a read of the catalog, for the commands
// that only read it.
func loadCatalog(cmd *cobra.Command) (imagesEnv, imagecatalog.Catalog, error) {
	env, err := imagesEnvOf(cmd)
	if err != nil {
		return env, imagecatalog.Catalog{}, err
	}
	c, _, err := env.store.Load(cmd.Context())
	return env, c, err
}

// write prints v as json or yaml, or calls table for -o table.
func (e imagesEnv) write(v any, table func(io.Writer) error) error {
	switch e.output {
	case "json":
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		enc := yaml.NewEncoder(e.out)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return err
		}
		return enc.Close()
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	if err := table(tw); err != nil {
		return err
	}
	return tw.Flush()
}

// keyFlags select channels; a flag left unset matches any value.
type keyFlags struct {
	channel                           string
	os, k8s, arch, provider, location string
}

func (k *keyFlags) register(cmd *cobra.Command, channelDefault string) {
	cmd.Flags().StringVar(&k.channel, "channel", channelDefault, "channel name")
	cmd.Flags().StringVar(&k.os, "os", "", "os release, e.g. ubuntu-2404 (unset: any)")
	cmd.Flags().StringVar(&k.k8s, "k8s", "", "kubernetes minor, e.g. 1.34 (unset: any)")
	cmd.Flags().StringVar(&k.arch, "arch", "", "amd64 or arm64 (unset: any)")
	cmd.Flags().StringVar(&k.provider, "provider", "", "provider, e.g. hcloud (unset: any)")
	cmd.Flags().StringVar(&k.location, "location", "", `location; "" for global images (unset: any)`)
}

func (k *keyFlags) query(cmd *cobra.Command) imagecatalog.Query {
	pick := func(flag, v string) string {
		if !cmd.Flags().Changed(flag) {
			return imagecatalog.Any
		}
		return v
	}
	return imagecatalog.Query{Channel: k.channel, Key: imagecatalog.Key{
		OS: pick("os", k.os), K8sMinor: pick("k8s", k.k8s), Arch: pick("arch", k.arch),
		Provider: pick("provider", k.provider), Location: pick("location", k.location),
	}}
}

// imageRow is an image as list and show print it.
type imageRow struct {
	imagecatalog.Image `yaml:",inline"`
	Channels           []string `json:"channels,omitempty" yaml:"channels,omitempty"`
}

func newImagesListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the catalog's images and the channels that point to them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, c, err := loadCatalog(cmd)
			if err != nil {
				return err
			}
			rows := []imageRow{}
			for _, im := range c.Images {
				rows = append(rows, imageRow{im, imagecatalog.PointersTo(c, im.ID)})
			}
			return env.write(rows, func(w io.Writer) error {
				fmt.Fprintln(w, "ID\tNAME\tPROVIDER\tLOCATION\tVERIFIED\tDEPRECATED\tCHANNELS")
				for _, r := range rows {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, r.Provider, dash(r.Location),
						yesNo(r.Verified != nil), yesNo(r.Deprecated != nil), dash(strings.Join(r.Channels, ",")))
				}
				return nil
			})
		},
	}
}

func newImagesShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show IMAGE-ID",
		Short: "Show one image: its name, inputs hash, manifest and channels",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, c, err := loadCatalog(cmd)
			if err != nil {
				return err
			}
			im, ok := c.Image(args[0])
			if !ok {
				return fmt.Errorf("image %q is not in %s: see 'prebake images list'", args[0], env.store)
			}
			row := imageRow{im, imagecatalog.PointersTo(c, im.ID)}
			return env.write(row, func(w io.Writer) error {
				fmt.Fprintf(w, "id:\t%s\nname:\t%s\nprovider:\t%s\nlocation:\t%s\ninputs hash:\t%s\ncreated:\t%s\n",
					im.ID, im.Name, im.Provider, dash(im.Location), im.InputsHash, im.Created.Format(time.RFC3339))
				fmt.Fprintf(w, "verified:\t%s\ndeprecated:\t%s\nchannels:\t%s\nunattended-upgrades disabled:\t%v\n",
					event(im.Verified), event(im.Deprecated), dash(strings.Join(row.Channels, ",")), im.Manifest.UnattendedUpgradesDisabled)
				fmt.Fprintln(w, "components:")
				for _, name := range sortedKeys(im.Manifest.Components) {
					fmt.Fprintf(w, "  %s\t%s\n", name, im.Manifest.Components[name])
				}
				return nil
			})
		},
	}
}

func newImagesResolveCommand() *cobra.Command {
	var k keyFlags
	cmd := &cobra.Command{
		Use:   "resolve",
		Short: "Print the one image id a channel resolves to, or say why there is none",
		Long: `Resolve a channel to exactly one image id, as prebake serve does for
each new machine at scale-up. Unset key flags match any value; a match on two channels with different
images is an error that names both.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, c, err := loadCatalog(cmd)
			if err != nil {
				return err
			}
			id, err := imagecatalog.Resolve(c, k.query(cmd))
			if err != nil {
				return err
			}
			im, _ := c.Image(id)
			res := struct {
				Image string `json:"image" yaml:"image"`
				Name  string `json:"name" yaml:"name"`
			}{id, im.Name}
			return env.write(res, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, id)
				return err
			})
		},
	}
	k.register(cmd, imagecatalog.ChannelStable)
	return cmd
}

func newImagesPromoteCommand() *cobra.Command {
	var (
		channel string
		dryRun  bool
	)
	cmd := &cobra.Command{
		Use:   "promote IMAGE-ID",
		Short: "Point a channel at a verified image; the previous image goes into the channel's history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := imagesEnvOf(cmd)
			if err != nil {
				return err
			}
			var changed bool
			apply := func(c imagecatalog.Catalog) (imagecatalog.Catalog, error) {
				var err error
				c, changed, err = imagecatalog.Promote(c, channel, args[0], time.Now().UTC())
				return c, err
			}
			c, err := updateCatalog(cmd, env, dryRun, apply)
			if err != nil {
				return err
			}
			im, _ := c.Image(args[0])
			k, _ := im.Key()
			ch, _ := c.Channel(channel, k)
			return env.write(ch, func(w io.Writer) error {
				verb := map[bool]string{false: "already points to", true: "now points to"}[changed]
				if dryRun && changed {
					verb = "would point to"
				}
				_, err := fmt.Fprintf(w, "channel %s (%s) %s %s (%s)\n", channel, k, verb, im.ID, im.Name)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&channel, "channel", imagecatalog.ChannelStable, "channel to point at the image")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the result without saving it")
	return cmd
}

func newImagesRollbackCommand() *cobra.Command {
	var (
		k      keyFlags
		reason string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Move a channel back one step in its history, recording why",
		Long: `Move a channel back to the image it pointed to before. The image it moves
away from is recorded with --reason. The key flags must select exactly one channel.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := imagesEnvOf(cmd)
			if err != nil {
				return err
			}
			q := k.query(cmd)
			var key imagecatalog.Key
			apply := func(c imagecatalog.Catalog) (imagecatalog.Catalog, error) {
				chs := imagecatalog.MatchChannels(c, q)
				switch len(chs) {
				case 0:
					return c, fmt.Errorf("rollback: no channel %s matches %s", q.Channel, q.Key)
				case 1:
				default:
					var keys []string
					for _, ch := range chs {
						keys = append(keys, "("+ch.Key.String()+")")
					}
					return c, fmt.Errorf("rollback: %d channels %s match; pick one with --os, --k8s, --arch, --provider, --location: %s",
						len(chs), q.Channel, strings.Join(keys, ", "))
				}
				key = chs[0].Key
				return imagecatalog.Rollback(c, q.Channel, key, reason, time.Now().UTC())
			}
			c, err := updateCatalog(cmd, env, dryRun, apply)
			if err != nil {
				return err
			}
			ch, _ := c.Channel(q.Channel, key)
			return env.write(ch, func(w io.Writer) error {
				verb := map[bool]string{false: "now points to", true: "would point to"}[dryRun]
				_, err := fmt.Fprintf(w, "channel %s (%s) %s %s; rolled back from %s\n", ch.Name, key, verb, ch.Image,
					ch.RolledBack[len(ch.RolledBack)-1].Image)
				return err
			})
		},
	}
	k.register(cmd, imagecatalog.ChannelStable)
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the catalog)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the result without saving it")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func newImagesGCCommand() *cobra.Command {
	var (
		keep   int
		inUse  []string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Delete images no channel, history window or live instance needs",
		Long: `Garbage-collect the catalog's images. An image is kept when a channel points to
it, when it is in the last --keep-history entries of a channel's history, or when a
live instance uses it: the provider's servers of the cluster are listed (with
--config), and --in-use adds more ids. Delete protection is turned on for channel
images and off for the rest, then the others are deleted in the cloud and dropped
from the catalog. --dry-run prints the plan and changes nothing; without --config
it plans from the catalog and --in-use alone.`,
		Example: `  prebake images gc --config prod.yaml --catalog configmap://kube-system/prebake-images --dry-run
  prebake images gc --config prod.yaml --catalog configmap://kube-system/prebake-images --keep-history 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := imagesEnvOf(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cloud, provider, location, err := cloudIfConfigured(cmd)
			if err != nil {
				return err
			}
			if cloud == nil && !dryRun {
				return fmt.Errorf("gc deletes in the cloud: give --config (the ProviderConfig) or use --dry-run")
			}
			c, _, err := env.store.Load(ctx)
			if err != nil {
				return err
			}
			used := map[string]bool{}
			for _, id := range inUse {
				used[id] = true
			}
			if cloud != nil {
				live, err := cloud.ListInstances(ctx)
				if err != nil {
					return err
				}
				for _, in := range live {
					if in.Image != "" {
						used[in.Image] = true
					}
				}
			}
			opts := imagecatalog.GCOptions{KeepHistory: keep, InUse: used}
			var plan imagecatalog.GCPlan
			var gcErr error
			if dryRun {
				if plan, err = imagecatalog.PlanGC(c, opts); err != nil {
					return err
				}
			} else {
				// GC lists the live instances again right before deleting.
				var after imagecatalog.Catalog
				after, plan, gcErr = imagecatalog.GC(ctx, cloud, cloud, c, opts)
				var gone []string
				for _, im := range c.Images {
					if _, ok := after.Image(im.ID); !ok {
						gone = append(gone, im.ID)
					}
				}
				saved, err := imagecatalog.Update(ctx, env.store, func(cur imagecatalog.Catalog) (imagecatalog.Catalog, error) {
					return imagecatalog.Forget(cur, gone)
				})
				if err != nil {
					return errors.Join(gcErr, fmt.Errorf("gc: deleted %v in the cloud but could not save the catalog: %w", gone, err))
				}
				if _, err := imagecatalog.PushLabels(ctx, cloud, saved, provider, location); err != nil {
					gcErr = errors.Join(gcErr, err)
				}
			}
			if err := env.write(plan, func(w io.Writer) error {
				verb := map[bool]string{true: "would delete", false: "delete"}[dryRun]
				fmt.Fprintln(w, "IMAGE\tNAME\tACTION\tWHY")
				for _, k := range plan.Keep {
					im, _ := c.Image(k.ID)
					fmt.Fprintf(w, "%s\t%s\tkeep\t%s\n", k.ID, im.Name, strings.Join(k.Reasons, "; "))
				}
				for _, id := range plan.Delete {
					im, _ := c.Image(id)
					fmt.Fprintf(w, "%s\t%s\t%s\tno channel, history window or live instance needs it\n", id, im.Name, verb)
				}
				return nil
			}); err != nil {
				return err
			}
			return gcErr
		},
	}
	cmd.Flags().IntVar(&keep, "keep-history", imagecatalog.DefaultKeepHistory, "history entries to keep per channel")
	cmd.Flags().StringSliceVar(&inUse, "in-use", nil, "more image ids that live instances use (comma-separated)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan without deleting anything")
	return cmd
}

// updateCatalog applies fn to the stored catalog with compare-and-swap, or
// only in memory under --dry-run. After a save it pushes the catalog's
// labels (channel pointers, deprecation) to the cloud when --config is
// given, so that sync can rebuild the catalog.
func updateCatalog(cmd *cobra.Command, env imagesEnv, dryRun bool, fn func(imagecatalog.Catalog) (imagecatalog.Catalog, error)) (imagecatalog.Catalog, error) {
	ctx := cmd.Context()
	if dryRun {
		c, _, err := env.store.Load(ctx)
		if err != nil {
			return c, err
		}
		return fn(c)
	}
	cloud, provider, location, err := cloudIfConfigured(cmd)
	if err != nil {
		return imagecatalog.Catalog{}, err
	}
	c, err := imagecatalog.Update(ctx, env.store, fn)
	if err != nil || cloud == nil {
		return c, err
	}
	if _, err := imagecatalog.PushLabels(ctx, cloud, c, provider, location); err != nil {
		return c, fmt.Errorf("the catalog was saved, but its labels were not all pushed to the cloud (run the command again): %w", err)
	}
	return c, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func event(e *imagecatalog.Event) string {
	if e == nil {
		return "-"
	}
	if e.Reason == "" {
		return e.At.Format(time.RFC3339)
	}
	return e.At.Format(time.RFC3339) + " (" + e.Reason + ")"
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
