package deploy

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// secretConsumers lists, for each Secret the manifests reference (by name
// before kustomize's hash suffix), the only containers that may read it.
// A Secret not listed here may not be mounted at all: add it with a reason.
var secretConsumers = map[string][]string{
	"hcloud-token":       {"prebake", "image-refresh"}, // the Hetzner API token: the provider and the image refresh CronJob call Hetzner
	"prebake-ssh":        {"prebake"},                  // the static provider's SSH client key and the machines' known_hosts
	"prebake-server-tls": {"prebake"},                  // serving certificate and client CA
	"prebake-client-tls": {"cluster-autoscaler"},       // CA's client certificate for cloud-config
}

// podSpecPaths says where each workload kind keeps its pod spec.
var podSpecPaths = map[string][]string{
	"Pod":         {"spec"},
	"Deployment":  {"spec", "template", "spec"},
	"StatefulSet": {"spec", "template", "spec"},
	"DaemonSet":   {"spec", "template", "spec"},
	"ReplicaSet":  {"spec", "template", "spec"},
	"Job":         {"spec", "template", "spec"},
	"CronJob":     {"spec", "jobTemplate", "spec", "template", "spec"},
}

// violations returns every breach of the hardening policy in objs, one
// line each, naming the object and container.
func violations(objs []*unstructured.Unstructured) ([]string, error) {
	var out []string
	for _, o := range objs {
		where := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		if o.GetKind() == "Secret" && strings.Contains(o.GetName(), "token") {
			out = append(out, where+": a token Secret is inlined in the manifests; reference one the user creates")
		}
		path, ok := podSpecPaths[o.GetKind()]
		if !ok {
			continue
		}
		raw, found, err := unstructured.NestedMap(o.Object, path...)
		if err != nil || !found {
			return nil, fmt.Errorf("%s: no pod spec at %s: %v", where, strings.Join(path, "."), err)
		}
		var spec corev1.PodSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(raw, &spec, true); err != nil {
			return nil, fmt.Errorf("%s: pod spec: %w", where, err)
		}
		out = append(out, podViolations(where, &spec)...)
	}
	return out, nil
}

func podViolations(where string, spec *corev1.PodSpec) []string {
	var out []string
	pod := spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	secretOfVolume := map[string][]string{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			secretOfVolume[v.Name] = append(secretOfVolume[v.Name], v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					secretOfVolume[v.Name] = append(secretOfVolume[v.Name], s.Secret.Name)
				}
			}
		}
	}
	containers := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, c := range containers {
		at := fmt.Sprintf("%s container %q", where, c.Name)
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = pod.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			out = append(out, at+": runAsNonRoot is not true")
		}
		user := sc.RunAsUser
		if user == nil {
			user = pod.RunAsUser
		}
		if user != nil && *user == 0 {
			out = append(out, at+": runs as root (runAsUser 0)")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			out = append(out, at+": readOnlyRootFilesystem is not true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			out = append(out, at+": allowPrivilegeEscalation is not false")
		}
		if sc.Privileged != nil && *sc.Privileged {
			out = append(out, at+": privileged")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			out = append(out, at+": capabilities do not drop ALL")
		} else if len(sc.Capabilities.Add) > 0 {
			out = append(out, fmt.Sprintf("%s: adds capabilities %v", at, sc.Capabilities.Add))
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = pod.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost {
			out = append(out, at+": no RuntimeDefault (or Localhost) seccomp profile")
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[r]; !ok {
				out = append(out, fmt.Sprintf("%s: no %s request", at, r))
			}
			if _, ok := c.Resources.Limits[r]; !ok {
				out = append(out, fmt.Sprintf("%s: no %s limit", at, r))
			}
		}
		var secrets []string
		for _, m := range c.VolumeMounts {
			secrets = append(secrets, secretOfVolume[m.Name]...)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				secrets = append(secrets, e.ValueFrom.SecretKeyRef.Name)
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				secrets = append(secrets, e.SecretRef.Name)
			}
		}
		for _, s := range secrets {
			allowed, known := secretConsumers[secretBaseName(s)]
			switch {
			case !known:
				out = append(out, fmt.Sprintf("%s: reads Secret %q, which is not in secretConsumers", at, s))
			case !slices.Contains(allowed, c.Name):
				out = append(out, fmt.Sprintf("%s: reads Secret %q, which only %v need", at, s, allowed))
			}
		}
	}
	return out
}

// secretBaseName strips kustomize's hash suffix from a generated name.
func secretBaseName(name string) string {
	if i := strings.LastIndex(name, "-"); i > 0 && isHashSuffix(name[i+1:]) {
		return name[:i]
	}
	return name
}
