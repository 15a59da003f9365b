// Package helm renders the crowdlog Helm chart (./crowdlog) for one
// operator with the Helm Go SDK and decodes every object strictly into the
// Kubernetes API types, so tests check what `helm install` would create
// without a cluster or the helm binary.
package helm

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Operators are the operators the chart installs, one release each; each
// has its values file values/OPERATOR.yaml. There is no issuer operator:
// each issuer runs at the operator that verifies its tokens (the
// aggregator's: report tokens and ARC; the randomness operator's:
// randomness tokens), and the attester's enrollment list is a ConfigMap.
// Prio3 mode's two aggregators are two operators: the leader runs at the
// aggregator operator (prio3.leader.enabled), the helper at prio3-helper,
// each beside the issuer of its own tokens (issuer --role prio3-leader,
// issuer --role prio3-helper) with its credentials.
var Operators = []string{"relay-a", "relay-b", "randomness", "aggregator", "prio3-helper", "release", "pipeline-operator"}

// Dir is the directory of this package: the chart is Dir/crowdlog, the
// values files Dir/values.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Object is one rendered object: its kind, name and namespace and its
// decoded value (*appsv1.Deployment, *corev1.Service, ...; a ServiceMonitor
// is *unstructured.Unstructured, the Prometheus operator's types not being
// a dependency).
type Object struct {
	Kind, Name, Namespace string
	Value                 any
}

// kinds maps apiVersion/kind to a constructor of its API type.
var kinds = map[string]func() any{
	"v1/ServiceAccount":                       func() any { return new(corev1.ServiceAccount) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                               func() any { return new(corev1.Secret) },
	"v1/PersistentVolumeClaim":                func() any { return new(corev1.PersistentVolumeClaim) },
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"batch/v1/Job":                            func() any { return new(batchv1.Job) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return new(networkingv1.NetworkPolicy) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(unstructured.Unstructured) },
}

// Render renders the chart as `helm install RELEASE -n NAMESPACE -f
// values/OPERATOR.yaml` would (hooks included), with set merged over the
// values file as --set merges (natsConfig, say; a map merges key by key:
// {"kafka": {"brokers": ...}} keeps the file's kafka.user), and decodes
// each object strictly: an
// unknown field, kind or apiVersion is an error. The release is named after
// the operator, in namespace crowdlog-OPERATOR.
func Render(operator string, set map[string]any) ([]Object, error) {
	chrt, err := loader.Load(filepath.Join(Dir(), "crowdlog"))
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ReadValuesFile(filepath.Join(Dir(), "values", operator+".yaml"))
	if err != nil {
		return nil, err
	}
	merge(vals, set)
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly = true, true
	inst.ReleaseName, inst.Namespace = operator, "crowdlog-"+operator
	inst.Replace = true
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	text := rel.Manifest
	for _, h := range rel.Hooks {
		text += "\n---\n" + h.Manifest
	}
	return Decode(text)
}

// merge sets every key of src in dst, merging maps key by key (as Helm
// merges --set over -f) and replacing any other value.
func merge(dst, src map[string]any) {
	for k, v := range src {
		sm, ok := v.(map[string]any)
		dm, dok := dst[k].(map[string]any)
		if ok && dok {
			merge(dm, sm)
			continue
		}
		dst[k] = v
	}
}

// Decode splits a multi-document manifest and decodes each non-empty
// document strictly into its API type.
func Decode(manifest string) ([]Object, error) {
	var out []Object
	for _, doc := range splitDocs(manifest) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name, Namespace string
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return nil, err
		}
		mk, ok := kinds[head.APIVersion+"/"+head.Kind]
		if !ok {
			return nil, fmt.Errorf("%s %s: apiVersion/kind %s/%s not expected", head.Kind, head.Metadata.Name, head.APIVersion, head.Kind)
		}
		v := mk()
		if u, ok := v.(*unstructured.Unstructured); ok {
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				return nil, err
			}
		} else if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
			return nil, fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
		}
		out = append(out, Object{Kind: head.Kind, Name: head.Metadata.Name, Namespace: head.Metadata.Namespace, Value: v})
	}
	return out, nil
}

// splitDocs returns the documents of a YAML stream that hold more than
// comments.
func splitDocs(s string) []string {
	var docs []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		has := false
		for _, line := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				has = true
				break
			}
		}
		if has {
			docs = append(docs, d)
		}
	}
	return docs
}

// Container is one container of a rendered pod template with its pod.
type Container struct {
	Owner string // Kind/name of the Deployment or Job
	Pod   *corev1.PodSpec
	*corev1.Container
}

// Containers returns every container of objs' pod templates.
func Containers(objs []Object) []Container {
	var out []Container
	for _, o := range objs {
		var pod *corev1.PodSpec
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			pod = &v.Spec.Template.Spec
		case *batchv1.Job:
			pod = &v.Spec.Template.Spec
		default:
			continue
		}
		for i := range pod.Containers {
			out = append(out, Container{Owner: o.Kind + "/" + o.Name, Pod: pod, Container: &pod.Containers[i]})
		}
	}
	return out
}

// Paths returns the absolute file paths c names: argument values and the
// values of CROWDLOG_*_FILE variables, in order, without repeats.
func (c Container) Paths() []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if strings.HasPrefix(p, "/") && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, a := range c.Args {
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") {
			a = v
		}
		add(a)
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "CROWDLOG_") && strings.HasSuffix(e.Name, "_FILE") {
			add(e.Value)
		}
	}
	sort.Strings(out)
	return out
}

// Readable checks that the process of c (its pod's runAsUser and fsGroup)
// can read path: it lies under one of c's volume mounts; in a Secret or
// ConfigMap volume that lists items it is one of the items, and its mode
// (item mode, else defaultMode, else 0644) grants read to the owner only
// if the owner is the uid (never: kubelet writes them as root), to the
// group if the group is fsGroup, or to others; emptyDir and
// PersistentVolumeClaim volumes belong to fsGroup (group rwx).
func (c Container) Readable(path string) error {
	sc := c.Pod.SecurityContext
	if sc == nil || sc.RunAsUser == nil || sc.FSGroup == nil {
		return errors.New("pod has no runAsUser and fsGroup")
	}
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			if best == nil || len(m.MountPath) > len(best.MountPath) {
				best = &c.VolumeMounts[i]
			}
		}
	}
	if best == nil {
		return fmt.Errorf("%s: under no volume mount", path)
	}
	var vol *corev1.Volume
	for i := range c.Pod.Volumes {
		if c.Pod.Volumes[i].Name == best.Name {
			vol = &c.Pod.Volumes[i]
		}
	}
	if vol == nil {
		return fmt.Errorf("%s: mount %s names no volume %q", path, best.MountPath, best.Name)
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, best.MountPath), "/")
	if best.SubPath != "" { // the mount is the item (or directory) SubPath of the volume
		rel = strings.TrimSuffix(best.SubPath+"/"+rel, "/")
	}
	var items []corev1.KeyToPath
	var defMode *int32
	switch {
	case vol.Secret != nil:
		items, defMode = vol.Secret.Items, vol.Secret.DefaultMode
	case vol.ConfigMap != nil:
		items, defMode = vol.ConfigMap.Items, vol.ConfigMap.DefaultMode
	case vol.EmptyDir != nil, vol.PersistentVolumeClaim != nil:
		return nil
	default:
		return fmt.Errorf("%s: volume %s of a kind not checked", path, vol.Name)
	}
	mode := int32(0o644)
	if defMode != nil {
		mode = *defMode
	}
	if rel == "" { // the directory itself
		return nil
	}
	if len(items) > 0 {
		found := false
		for _, it := range items {
			if it.Path == rel {
				found = true
				if it.Mode != nil {
					mode = *it.Mode
				}
			}
		}
		if !found {
			return fmt.Errorf("%s: volume %s has no item %s", path, vol.Name, rel)
		}
	}
	if mode&0o004 != 0 || mode&0o040 != 0 {
		return nil
	}
	return fmt.Errorf("%s: mode %#o, owned by root, group %d: uid %d cannot read it", path, mode, *sc.FSGroup, *sc.RunAsUser)
}
