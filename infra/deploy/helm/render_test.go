package helm

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TestRenderEveryOperator renders the chart with each operator's values
// file and checks what every release must have: objects only in its own
// namespace, a ServiceAccount, a NetworkPolicy, pods that run as uid 65532
// with fsGroup 65532 and a read-only root file system, a
// PodDisruptionBudget and ServiceMonitor per Deployment, and every file a
// container names readable through one of its mounts.
func TestRenderEveryOperator(t *testing.T) {
	for _, op := range Operators {
		t.Run(op, func(t *testing.T) {
			objs, err := Render(op, map[string]any{"natsConfig": "# nats.conf\n", "epochs": []any{"2006-03", "Week_1.b"}})
			if err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			var deployments []string
			pdb, sm := map[string]bool{}, map[string]bool{}
			for _, o := range objs {
				count[o.Kind]++
				if errs := validation.IsDNS1123Label(o.Name); len(errs) > 0 {
					t.Errorf("%s %q: %v", o.Kind, o.Name, errs)
				}
				if o.Namespace != "crowdlog-"+op {
					t.Errorf("%s %s in namespace %q, want crowdlog-%s", o.Kind, o.Name, o.Namespace, op)
				}
				switch v := o.Value.(type) {
				case *appsv1.Deployment:
					deployments = append(deployments, o.Name)
				case *policyv1.PodDisruptionBudget:
					pdb[v.Spec.Selector.MatchLabels["app.kubernetes.io/component"]] = true
				case *unstructured.Unstructured:
					c, _, _ := unstructured.NestedString(v.Object, "spec", "selector", "matchLabels", "app.kubernetes.io/component")
					eps, _, _ := unstructured.NestedSlice(v.Object, "spec", "endpoints")
					if len(eps) != 1 {
						t.Errorf("ServiceMonitor %s: endpoints %v", o.Name, eps)
					}
					sm[c] = true
				case *networkingv1.NetworkPolicy:
					if !slices.Contains(v.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(v.Spec.Egress) < 2 {
						t.Errorf("NetworkPolicy %s does not restrict egress: %+v", o.Name, v.Spec)
					}
				case *batchv1.Job:
					if v.Spec.Template.Spec.RestartPolicy == corev1.RestartPolicyAlways {
						t.Errorf("Job %s restarts always", o.Name)
					}
				}
			}
			if count["ServiceAccount"] != 1 || count["NetworkPolicy"] != 1 {
				t.Errorf("kinds %v: want one ServiceAccount and one NetworkPolicy", count)
			}
			for _, d := range deployments {
				if !pdb[d] || !sm[d] {
					t.Errorf("Deployment %s: PodDisruptionBudget %v, ServiceMonitor %v", d, pdb[d], sm[d])
				}
			}
			cs := Containers(objs)
			if len(cs) == 0 {
				t.Fatal("no containers")
			}
			for _, c := range cs {
				checkSecurity(t, c)
				for _, p := range c.Paths() {
					if err := c.Readable(p); err != nil {
						t.Errorf("%s container %s: %v", c.Owner, c.Name, err)
					}
				}
			}
			t.Logf("%v", count)
		})
	}
}

func checkSecurity(t *testing.T, c Container) {
	t.Helper()
	ps, cs := c.Pod.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 65532 || ps.FSGroup == nil || *ps.FSGroup != 65532 {
		t.Errorf("%s: pod securityContext %+v: want runAsNonRoot, runAsUser and fsGroup 65532", c.Owner, ps)
	}
	if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
		t.Errorf("%s: container securityContext %+v: want a read-only root and no privilege escalation", c.Owner, cs)
	}
	if c.Pod.AutomountServiceAccountToken == nil || *c.Pod.AutomountServiceAccountToken || !strings.HasPrefix(c.Pod.ServiceAccountName, "crowdlog-") {
		t.Errorf("%s: service account %q, token mounted", c.Owner, c.Pod.ServiceAccountName)
	}
}

// TestReadableRefuses: the file check catches a path outside every mount,
// a Secret item not projected, and a 0400 file (root's: uid 65532 cannot
// read it even with fsGroup).
func TestReadableRefuses(t *testing.T) {
	objs, err := Render("relay-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := Containers(objs)[0]
	if err := c.Readable("/etc/crowdlog/keys/relay-a.key"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/keys/relay-a.key", "/etc/crowdlog/keys/relay-b.key"} {
		if err := c.Readable(p); err == nil {
			t.Errorf("%s readable", p)
		}
	}
	for i := range c.Pod.Volumes {
		if s := c.Pod.Volumes[i].Secret; s != nil {
			m := int32(0o400)
			s.DefaultMode = &m
		}
	}
	if err := c.Readable("/etc/crowdlog/keys/relay-a.key"); err == nil {
		t.Error("a 0400 Secret file is readable")
	}
}

// TestDecodeStrict: an unknown field or kind fails the decoding.
func TestDecodeStrict(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\nbogus: 1\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n",
	} {
		if _, err := Decode(doc); err == nil {
			t.Errorf("decoded %q", doc)
		}
	}
	if _, err := Decode("# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"); err != nil {
		t.Error(err)
	}
}

// TestLint runs `helm lint --strict` (the SDK's action.Lint) with each
// operator's values: no warning or error. Lint reports `fail` and
// `required` only as INFO; TestRenderRefuses covers them.
func TestLint(t *testing.T) {
	for _, op := range Operators {
		vals, err := chartutil.ReadValuesFile(filepath.Join(Dir(), "values", op+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		l := action.NewLint()
		l.Strict, l.Namespace = true, "crowdlog-"+op
		res := l.Run([]string{filepath.Join(Dir(), "crowdlog")}, vals)
		for _, m := range res.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: %v", op, m)
			}
		}
		for _, err := range res.Errors {
			t.Errorf("%s: %v", op, err)
		}
	}
}

// TestRenderRefuses: an unknown operator and a missing Secret or SASL user
// fail the install, as `helm install` would.
func TestRenderRefuses(t *testing.T) {
	for _, c := range []struct {
		op  string
		set map[string]any
	}{
		{"relay-a", map[string]any{"operator": "relay-c"}},
		{"relay-a", map[string]any{"keys": map[string]any{"secret": ""}}},
		{"relay-b", map[string]any{"kafka": map[string]any{"user": ""}}},
	} {
		if _, err := Render(c.op, c.set); err == nil {
			t.Errorf("%s with %v rendered", c.op, c.set)
		}
	}
}
