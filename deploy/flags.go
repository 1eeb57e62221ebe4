package deploy

import (
	"embed"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

//go:embed base/cluster-autoscaler.yaml base/prebake.yaml
var base embed.FS

// BaseArg returns the value of flag (such as "--expander") in the args of
// container in deploy/base/<file>'s Deployment: what the shipped manifests
// run with, for tests and the demo to run with the same. ok is false when
// the flag is not set.
func BaseArg(file, container, flag string) (value string, ok bool, err error) {
	raw, err := base.ReadFile("base/" + file)
	if err != nil {
		return "", false, err
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var d appsv1.Deployment
		if err := sigsyaml.Unmarshal([]byte(doc), &d); err != nil {
			return "", false, fmt.Errorf("deploy/base/%s: %w", file, err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != container {
				continue
			}
			for _, a := range append(c.Command, c.Args...) {
				if v, found := strings.CutPrefix(a, flag+"="); found {
					return v, true, nil
				}
			}
			return "", false, nil
		}
	}
	return "", false, fmt.Errorf("deploy/base/%s: no Deployment with a container %q", file, container)
}

// CAExpander is the --expander value deploy/base runs cluster-autoscaler
// with.
func CAExpander() (string, error) {
	v, ok, err := BaseArg("cluster-autoscaler.yaml", "cluster-autoscaler", "--expander")
	if err == nil && !ok {
		err = fmt.Errorf("deploy/base/cluster-autoscaler.yaml sets no --expander")
	}
	return v, err
}
