package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/prebake-dev/prebake/autoscaling/canary"
	"github.com/prebake-dev/prebake/bootstrap"
	"github.com/prebake-dev/prebake/cmd/prebake/app"
	"github.com/prebake-dev/prebake/imagecatalog"
)

func newImagesPublishCommand() *cobra.Command {
	var (
		channel, name, hash, manifest, verified string
		dryRun                                  bool
	)
	cmd := &cobra.Command{
		Use:   "publish IMAGE-ID",
		Short: "Add an existing cloud image to the catalog, label it, and optionally point a channel at it",
		Long: `Publish an image that exists in the cloud (for example one Packer made) into the
catalog. Its name, inputs hash and manifest come from the flags, or else from the
image's prebake.dev/ labels. The image is then labelled with everything the catalog
knows, so 'prebake images sync' can rebuild it. With --channel the channel is pointed
at it, which needs a verified image: pass --verified "who checked it" for an image
verified outside 'prebake images build'.`,
		Example: `  prebake images publish 123456 --config prod.yaml --name prebake-ubuntu-2404-k8s-1-34-2-amd64-20261130t1504 \
    --inputs-hash 4f1c... --manifest manifest.yaml --verified "goss suite, CI run 812" --channel candidate`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := imagesEnvOf(cmd)
			if err != nil {
				return err
			}
			cloud, provider, location, err := cloudOf(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			ci, err := cloud.GetImage(ctx, args[0])
			if err != nil {
				return err
			}
			req := imagecatalog.PublishRequest{ID: args[0], Provider: provider, Location: location, Name: name, InputsHash: hash}
			if manifest != "" {
				m, err := readManifest(manifest)
				if err != nil {
					return err
				}
				req.Manifest = &m
			}
			now := time.Now().UTC()
			if verified != "" {
				req.Verified = &imagecatalog.Event{At: now, Reason: verified}
			}
			im, err := imagecatalog.ImageForPublish(ci, req)
			if err != nil {
				return err
			}
			apply := func(c imagecatalog.Catalog) (imagecatalog.Catalog, error) {
				if _, ok := c.Image(im.ID); !ok {
					var err error
					if c, err = imagecatalog.Publish(c, im); err != nil {
						return c, err
					}
				}
				if channel == "" {
					return c, nil
				}
				c, _, err := imagecatalog.Promote(c, channel, im.ID, now)
				return c, err
			}
			if _, err := updateCatalog(cmd, env, dryRun, apply); err != nil {
				return err
			}
			return env.write(im, func(w io.Writer) error {
				verb := map[bool]string{true: "would publish", false: "published"}[dryRun]
				msg := fmt.Sprintf("%s %s (%s)", verb, im.ID, im.Name)
				if channel != "" {
					msg += " to " + channel
				}
				_, err := fmt.Fprintln(w, msg)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&channel, "channel", "", "channel to point at the image, e.g. candidate (default: none)")
	cmd.Flags().StringVar(&name, "name", "", "image name (default: its prebake.dev/image-name label)")
	cmd.Flags().StringVar(&hash, "inputs-hash", "", "inputs hash (default: its prebake.dev/inputs-hash label)")
	cmd.Flags().StringVar(&manifest, "manifest", "", "YAML manifest file (components, sysctls, modules, unattendedUpgradesDisabled); default: its labels")
	cmd.Flags().StringVar(&verified, "verified", "", "record that the image passed verification elsewhere, and how")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check and print without saving or labelling")
	return cmd
}

func readManifest(path string) (imagecatalog.Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return imagecatalog.Manifest{}, fmt.Errorf("--manifest: %w", err)
	}
	var m imagecatalog.Manifest
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("--manifest %s: %w", path, err)
	}
	if err := m.Validate(); err != nil {
		return m, fmt.Errorf("--manifest %s: %w", path, err)
	}
	return m, nil
}

func newImagesDeprecateCommand() *cobra.Command {
	var (
		reason string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "deprecate IMAGE-ID",
		Short: "Mark an image so nothing new resolves to it or is promoted to it (irreversible)",
		Long: `Deprecate an image. It is irreversible, as on GCE: the image can't be promoted or
rolled back to, and a channel that points to it stops resolving until it is rolled
back or promoted past. Instances already running are not touched; gc deletes the
image once nothing keeps it. With --config the image is labelled prebake.dev/deprecated.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := imagesEnvOf(cmd)
			if err != nil {
				return err
			}
			var changed bool
			apply := func(c imagecatalog.Catalog) (imagecatalog.Catalog, error) {
				var err error
				c, changed, err = imagecatalog.Deprecate(c, args[0], reason, time.Now().UTC())
				return c, err
			}
			c, err := updateCatalog(cmd, env, dryRun, apply)
			if err != nil {
				return err
			}
			im, _ := c.Image(args[0])
			return env.write(im, func(w io.Writer) error {
				verb := map[bool]string{true: "deprecated", false: "was already deprecated"}[changed]
				if dryRun && changed {
					verb = "would be deprecated"
				}
				msg := fmt.Sprintf("image %s (%s) %s", im.ID, im.Name, verb)
				if ptrs := imagecatalog.PointersTo(c, im.ID); len(ptrs) > 0 {
					msg += "; channels still naming it: " + strings.Join(ptrs, ",") + " (roll back or promote another)"
				}
				_, err := fmt.Fprintln(w, msg)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the catalog)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show the result without saving it")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func newImagesSyncCommand() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "Rebuild the catalog's images and channels for the provider from the cloud's labels",
		Long: `Rebuild the catalog from the cloud: every image labelled prebake.dev/image-name,
its manifest, verification and deprecation, and the channels and their history from
the prebake.dev/channel-NAME labels. The provider's part of the catalog is replaced;
other providers' parts and the rollback records of channels that still exist are
kept. Labels can't carry reasons and exact times: the image's creation time stands
in. If an image's labels can't be read, nothing is saved and every problem is listed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := imagesEnvOf(cmd)
			if err != nil {
				return err
			}
			cloud, provider, location, err := cloudOf(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			fresh, errs := imagecatalog.Sync(ctx, cloud, provider, location, time.Now().UTC())
			if len(errs) > 0 {
				return fmt.Errorf("sync: the cloud's labels are inconsistent; nothing was saved: %w", errors.Join(errs...))
			}
			apply := func(c imagecatalog.Catalog) (imagecatalog.Catalog, error) {
				return imagecatalog.Replace(c, fresh, provider, location)
			}
			var c imagecatalog.Catalog
			if dryRun {
				cur, _, err := env.store.Load(ctx)
				if err != nil {
					return err
				}
				c, err = apply(cur)
				if err != nil {
					return err
				}
			} else if c, err = imagecatalog.Update(ctx, env.store, apply); err != nil {
				return err
			}
			return env.write(fresh, func(w io.Writer) error {
				verb := map[bool]string{true: "would sync", false: "synced"}[dryRun]
				fmt.Fprintf(w, "%s %d images and %d channels of %s into %s (%d images in all)\n",
					verb, len(fresh.Images), len(fresh.Channels), provider, env.store, len(c.Images))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "read the cloud and print without saving")
	return cmd
}

type buildFlags struct {
	recipe        string
	only          []string
	poll, timeout time.Duration
	dryRun        bool
}

func (b *buildFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&b.recipe, "recipe", "", "ImageRecipe file listing the images to build (example: deploy/components/image-refresh/recipe.yaml)")
	cmd.Flags().StringSliceVar(&b.only, "only", nil, `build only these keys, as "os/k8s-minor/arch", e.g. ubuntu-2404/1.34/amd64`)
	cmd.Flags().DurationVar(&b.poll, "poll", 10*time.Second, "how often to read the builder while it works (and the --canary-group Node)")
	cmd.Flags().DurationVar(&b.timeout, "timeout", 30*time.Minute, "how long to wait for the builder's report")
	cmd.Flags().BoolVar(&b.dryRun, "dry-run", false, "say what would be built; boot nothing, change nothing")
	_ = cmd.MarkFlagRequired("recipe")
}

// open is what build and refresh start from: the catalog and output, the
// recipe's build specs, and the provider's image API.
func (b *buildFlags) open(cmd *cobra.Command) (imagesEnv, []imagecatalog.BuildSpec, imageCloud, error) {
	env, err := imagesEnvOf(cmd)
	if err != nil {
		return imagesEnv{}, nil, nil, err
	}
	if _, err := imagecatalog.LoadRecipe(b.recipe); err != nil {
		return imagesEnv{}, nil, nil, err
	}
	cloud, _, _, err := cloudOf(cmd)
	if err != nil {
		return imagesEnv{}, nil, nil, err
	}
	src, err := builderSourcesOf(cmd, cloud)
	if err != nil {
		return imagesEnv{}, nil, nil, err
	}
	specs, err := b.specs(src)
	if err != nil {
		return imagesEnv{}, nil, nil, err
	}
	return env, specs, cloud, nil
}

func (b *buildFlags) specs(src builderSources) ([]imagecatalog.BuildSpec, error) {
	specs, err := imagecatalog.LoadRecipe(b.recipe)
	if err != nil {
		return nil, err
	}
	for i := range specs {
		if specs[i].UserData != nil {
			continue
		}
		if specs[i].UserData, err = builderUserData(specs[i], src); err != nil {
			return nil, fmt.Errorf("%s: images[%d] (no userDataFile): %w", b.recipe, i, err)
		}
	}
	if len(b.only) == 0 {
		return specs, nil
	}
	var out []imagecatalog.BuildSpec
	for _, s := range specs {
		k := s.Key()
		for _, o := range b.only {
			if o == k.OS+"/"+k.K8sMinor+"/"+k.Arch {
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--only %v matches no image of %s", b.only, b.recipe)
	}
	return out, nil
}

func newImagesBuildCommand() *cobra.Command {
	var b buildFlags
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build, verify and publish to candidate each image of a recipe (nothing when its inputs are already built)",
		Long: `For each image of the recipe: when no image has the same inputs hash (base image,
requested versions, user-data), boot a builder server from the base image with the
builder user-data, wait for the builder's report, check the versions it observed against
the requested ones and the hygiene checks, shut it down and snapshot it, label the
snapshot, delete the builder and publish the image to the candidate channel.
The report comes over SSH on Hetzner (prebake makes a host key and a login key for each
builder, puts them in its cloud-config, and runs the builder's seal step as root; the
builder must be reachable on port 22 from where this runs) and from the guest attribute
prebake/report on GCE (docs/images.md, "The builder's report"); on docker the builder is a
container, its report is read out of it, and its containerd content (the pulled pod images)
is committed with it (docs/docker.md).
The builder user-data is the image's userDataFile (a #cloud-config) when the recipe names
one; otherwise it is rendered by bootstrap: every component installed at its exact version
from where --config's bootstrap.components installs it on nodes (a binary's url and sha256,
an apt package name), else as the apt package of its name; the kernel settings and the node
runtime the provider declares; the recipe's containerImages pulled into containerd;
unattended-upgrades disabled; once that
and cloud-init are done, the builder's seal: cleanup (SSH host keys and authorized keys,
machine-id, cloud-init state, apt lists and caches, logs) and its report
(` + bootstrap.BuildReportPath + `, what it observed).
Progress goes to stderr. Building the same inputs again creates nothing.`,
		Example: `  prebake images build --config prod.yaml --recipe images-recipe.yaml --catalog configmap://kube-system/prebake-images`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, specs, cloud, err := b.open(cmd)
			if err != nil {
				return err
			}
			opts := imagecatalog.BuildOptions{Poll: b.poll, Timeout: b.timeout, DryRun: b.dryRun, Progress: env.progress}
			var results []imagecatalog.BuildResult
			var errs []error
			for _, s := range specs {
				r, err := imagecatalog.Build(cmd.Context(), cloud, env.store, s, opts)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				results = append(results, r)
			}
			if err := env.write(results, func(w io.Writer) error {
				fmt.Fprintln(w, "IMAGE\tNAME\tBUILT\tWHY")
				for _, r := range results {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", dash(r.Image.ID), dash(r.Image.Name), yesNo(r.Built), r.Why)
				}
				return nil
			}); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	b.register(cmd)
	return cmd
}

func newImagesRefreshCommand(deps imagesDeps) *cobra.Command {
	var (
		b             buildFlags
		maxAge        time.Duration
		canaryCommand string
		canaryGroup   string
		canaryTimeout time.Duration
		to            string
	)
	cmd := &cobra.Command{
		Use:   "refresh",
		Short: "Rebuild images whose inputs changed or that are older than --max-age; promote candidates that pass the canary",
		Long: `For each image of the recipe: build (as 'prebake images build') when no image has
its inputs, or when the image that has them is older than --max-age. Then, when the
candidate channel points elsewhere than --to (stable), run the canary and promote the
candidate if it passes. Without a canary, refresh builds and publishes to candidate
but never promotes. deploy/ runs this as a CronJob.

--canary-group G is prebake's own canary. It builds the autoscaling core from
--config exactly as 'prebake serve' does (providers, bootstrap user-data, the cluster
found as serve finds it: the provider's or bootstrap's kubeconfig, $KUBECONFIG, or
in-cluster) and boots ONE machine of node group G from the candidate, through the
same request and user-data (a fresh join token) as a scale-up, with the extra taint
prebake.dev/canary=G:NoSchedule. It passes when the machine's Node is Ready, carries
prebake.dev/image=<candidate>, and, where bootstrap ran, its prebake.dev/bootstrap
annotation says prebaked with no runtime install. It fails on a create error, no
capacity, a mismatch, or --canary-timeout, saying what it last saw. Pass or fail, the
machine, its Node and its join token are deleted. The machine counts toward G while
it exists, so a G at maxSize is refused. Progress goes to stderr.

--canary-command is an operator's own canary instead: run by /bin/sh -c with
PREBAKE_IMAGE_ID, PREBAKE_IMAGE_NAME, PREBAKE_IMAGE_PROVIDER and
PREBAKE_IMAGE_LOCATION set; exit status 0 passes. Give one of the two, not both.`,
		Example: `  prebake images refresh --config prod.yaml --recipe recipe.yaml --max-age 168h --canary-group cx-fsn1
  prebake images refresh --config prod.yaml --recipe recipe.yaml --canary-command "/canary/join-test.sh"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if canaryCommand != "" && canaryGroup != "" {
				return errors.New("--canary-group and --canary-command are two canaries: give one of them, not both")
			}
			env, specs, cloud, err := b.open(cmd)
			if err != nil {
				return err
			}
			opts := imagecatalog.RefreshOptions{
				Build:  imagecatalog.BuildOptions{Poll: b.poll, Timeout: b.timeout, DryRun: b.dryRun, Progress: env.progress},
				MaxAge: maxAge, To: to,
			}
			switch {
			case canaryCommand != "":
				opts.Canary = imagecatalog.CommandCanary{Command: []string{"/bin/sh", "-c", canaryCommand}}
			case canaryGroup != "":
				stop, err := joinCanary(cmd, deps, &opts, canaryGroup, canaryTimeout, b.poll, b.dryRun, env.progress)
				if err != nil {
					return err
				}
				defer stop()
			}
			results, rerr := imagecatalog.Refresh(cmd.Context(), cloud, env.store, specs, opts)
			if err := env.write(results, func(w io.Writer) error {
				fmt.Fprintln(w, "KEY\tIMAGE\tBUILT\tPROMOTED\tWHY")
				for _, r := range results {
					why := r.Why
					if r.Err != "" {
						why = strings.TrimPrefix(why+"; error: "+r.Err, "; ")
					}
					fmt.Fprintf(w, "%s/%s/%s\t%s\t%s\t%s\t%s\n", r.Key.OS, r.Key.K8sMinor, r.Key.Arch, dash(r.Image), yesNo(r.Built), yesNo(r.Promoted), why)
				}
				return nil
			}); err != nil {
				return err
			}
			return rerr
		},
	}
	b.register(cmd)
	cmd.Flags().DurationVar(&maxAge, "max-age", 0, "rebuild an image older than this even if its inputs are unchanged (0: never)")
	cmd.Flags().StringVar(&canaryGroup, "canary-group", "", "node group of --config whose machine, booted from the candidate, must join as a Ready node before it is promoted")
	cmd.Flags().DurationVar(&canaryTimeout, "canary-timeout", canary.DefaultTimeout, "how long --canary-group waits for the machine's Node to be Ready")
	cmd.Flags().StringVar(&canaryCommand, "canary-command", "", "command that must pass before a candidate is promoted, instead of --canary-group")
	cmd.Flags().StringVar(&to, "to", imagecatalog.ChannelStable, "channel to promote a passing candidate to")
	return cmd
}

// joinCanary sets opts.Canary to the --canary-group canary: a core built
// from --config as serve builds it, started (stop shuts it down). A dry run
// only checks that the group exists and starts nothing.
func joinCanary(cmd *cobra.Command, deps imagesDeps, opts *imagecatalog.RefreshOptions, group string, timeout, poll time.Duration, dryRun bool, progress io.Writer) (stop func(), err error) {
	path, _ := cmd.Flags().GetString("config")
	if dryRun {
		provider, err := app.CheckCanaryGroup(path, group)
		if err != nil {
			return nil, err
		}
		opts.Canary = describedCanary(canary.Description(provider, group, timeout))
		return func() {}, nil
	}
	c, err := app.NewCanary(cmd.Context(), app.CanaryOptions{
		ConfigPath: path, Group: group, Kube: deps.kube,
		Canary: canary.Options{Timeout: timeout, Poll: poll, Progress: progress},
		Logger: slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, fmt.Errorf("--canary-group %s: %w", group, err)
	}
	opts.Canary = c
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			fmt.Fprintf(progress, "canary %s: shutdown: %v\n", group, err)
		}
	}, nil
}

// describedCanary is what a dry run shows of a canary it does not run.
type describedCanary string

func (d describedCanary) String() string { return string(d) }

func (d describedCanary) Check(context.Context, imagecatalog.Image) error {
	return fmt.Errorf("%s: not run in a dry run", string(d))
}
