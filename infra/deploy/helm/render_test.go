package helm

import (
	"maps"
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

	"github.com/crowdlog/crowdlog/infra/keydir"
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
			objs, err := Render(op, map[string]any{"natsConfig": "# nats.conf\n", "epochJobs": map[string]any{"pipelineDigest": testDigest}, "epochs": []any{"2006-03", "Week_1.b"},
				"prio3": leaderOn})
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
		"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
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
	// a Secret the operator must create: the install names the value and
	// the Secret's contents instead of falling back to another role's
	// credential (the aggregate role with the issuer's crowdlog-nats would
	// fail only at its first subscribe)
	for _, c := range []struct {
		set  map[string]any
		want string
	}{
		{map[string]any{"aggregator": map[string]any{"natsSecret": ""}}, "aggregator.natsSecret: the Secret of the aggregate role's own NATS credential"},
		{map[string]any{"prio3": map[string]any{"leader": map[string]any{"enabled": true, "natsSecret": ""}}}, "prio3.leader.natsSecret"},
		{map[string]any{"prio3": map[string]any{"leader": map[string]any{"enabled": true, "kafkaSecret": ""}}}, "prio3.leader.kafkaSecret"},
		{map[string]any{"prio3": map[string]any{"leader": map[string]any{"enabled": true, "keysSecret": ""}}}, "prio3.leader.keysSecret"},
	} {
		_, err := Render("aggregator", c.set)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("aggregator with %v: %v, want an error naming %q", c.set, err, c.want)
		}
	}
}

// TestTokenCustody: tokens are on and each is issued where it is verified
// (docs/threat-model.md, "Key custody"). The aggregator operator runs
// `issuer --role aggregator` on the PersistentVolumeClaim its aggregate
// role mounts read-only as `aggregate --keys`; the randomness operator runs
// `issuer --role randomness` on the claim of `randomness
// --require-tokens`; the prio3-helper operator runs `issuer --role
// prio3-helper` (TestPrio3Issuers); every issuer reads the attester's
// enrollment list from the ConfigMap; no other operator runs an issuer;
// every --epoch-length is the same.
func TestTokenCustody(t *testing.T) {
	lengths := map[string]string{} // operator/container -> --epoch-length
	issuers := map[string]string{} // operator -> --role of its issuer
	for _, op := range Operators {
		objs, err := Render(op, nil)
		if err != nil {
			t.Fatal(err)
		}
		claims := map[string]string{} // container -> claim at /var/lib/crowdlog (+ " ro")
		for _, c := range Containers(objs) {
			where := op + " " + c.Owner
			if v := flagArg(c.Args, "--epoch-length"); v != "" {
				lengths[where] = v
			}
			for _, m := range c.VolumeMounts {
				if m.MountPath != "/var/lib/crowdlog" {
					continue
				}
				for _, v := range c.Pod.Volumes {
					if v.Name == m.Name && v.PersistentVolumeClaim != nil {
						claims[c.Name] = v.PersistentVolumeClaim.ClaimName
						if m.ReadOnly {
							claims[c.Name] += " ro"
						}
					}
				}
			}
			if len(c.Args) == 0 || c.Args[0] != "issuer" {
				continue
			}
			issuers[op] = flagArg(c.Args, "--role")
			if flagArg(c.Args, "--keys") != "/var/lib/crowdlog" {
				t.Errorf("%s: issuer --keys %q, want its volume /var/lib/crowdlog", where, flagArg(c.Args, "--keys"))
			}
			if err := c.Readable("/var/lib/crowdlog/issuer.enrolled"); err != nil {
				t.Errorf("%s: the attester's enrollment list: %v", where, err)
			}
			found := false
			for _, m := range c.VolumeMounts {
				for _, v := range c.Pod.Volumes {
					if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == "crowdlog-enrollment" && m.MountPath == "/var/lib/crowdlog/issuer.enrolled" {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("%s: enrollment list not mounted from ConfigMap crowdlog-enrollment", where)
			}
		}
		switch op {
		case "aggregator":
			for _, c := range Containers(objs) {
				if c.Name == "aggregate" && flagArg(c.Args, "--keys") != "/var/lib/crowdlog" {
					t.Errorf("aggregate --keys %q: report tokens and ARC presentations not checked", flagArg(c.Args, "--keys"))
				}
			}
			if claims["aggregate"] != "issuer-state ro" || claims["issuer"] != "issuer-state" {
				t.Errorf("aggregator operator's volumes %v: want the issuer's claim issuer-state, read-only in aggregate", claims)
			}
		case "randomness":
			for _, c := range Containers(objs) {
				if c.Name == "randomness" && !slices.Contains(c.Args, "--require-tokens") {
					t.Errorf("randomness %v: tokens not required", c.Args)
				}
			}
			if claims["randomness"] != "randomness-state" || claims["issuer"] != "randomness-state" {
				t.Errorf("randomness operator's volumes %v: want randomness-state in both", claims)
			}
		}
	}
	if want := map[string]string{"aggregator": "aggregator", "randomness": "randomness", "prio3-helper": "prio3-helper"}; !maps.Equal(issuers, want) {
		t.Errorf("issuers per operator %v, want %v", issuers, want)
	}
	if len(lengths) != 4 {
		t.Errorf("--epoch-length in %v: want the randomness service, both issuers and the streams Job (the spent tokens' TTL)", lengths)
	}
	for w, l := range lengths {
		for w2, l2 := range lengths {
			if l != l2 {
				t.Errorf("%s --epoch-length %s, %s %s: clients name one epoch for both", w, l, w2, l2)
			}
		}
	}
}

// flagArg returns the value of flag in args ("--f v" or "--f=v"), or "".
func flagArg(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// TestKeyCustodyMounts renders the chart for every operator and checks
// that each workload mounts from its keys Secret only its own operator's
// private keys (infra/keydir.Custody) and the custody marker, so the key
// loaders (keydir.CheckPrivate) see the marker in the Secret mount and
// refuse another operator's key.
func TestKeyCustodyMounts(t *testing.T) {
	role := map[string]string{"pipeline-operator": keydir.RoleOperator}
	for _, op := range Operators {
		r := op
		if role[op] != "" {
			r = role[op]
		}
		rk, _ := keydir.RoleOf(r) // none (the release operator): no private keys
		objs, err := Render(op, map[string]any{"natsConfig": "# nats.conf\n", "epochJobs": map[string]any{"pipelineDigest": testDigest}, "epochs": []any{"2006-03"},
			"prio3": leaderOn})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range Containers(objs) {
			r, rk := r, rk
			if c.Name == "prio3-leader" || c.Name == "prio3-leader-issuer" { // the leader's own Secret at the aggregator operator
				r = keydir.RolePrio3Leader
				rk, _ = keydir.RoleOf(r)
			}
			for _, m := range c.VolumeMounts {
				if m.Name != "keys" { // at /etc/crowdlog/keys, or file by file in a token issuer's keys directory
					continue
				}
				var items []string
				for _, v := range c.Pod.Volumes {
					if v.Name == m.Name && v.Secret != nil {
						for _, it := range v.Secret.Items {
							items = append(items, it.Path)
						}
					}
				}
				if !slices.Contains(items, keydir.CustodyFile) {
					t.Errorf("%s %s: keys mount %v lacks the custody marker", op, c.Owner, items)
				}
				for _, it := range items {
					if it != keydir.CustodyFile && !slices.Contains(rk.Private, it) {
						t.Errorf("%s %s: mounts %s, not a private key of %s (%v)", op, c.Owner, it, r, rk.Private)
					}
				}
			}
		}
	}
}

// leaderOn is the prio3 value that enables the Prio3 leader at the
// aggregator operator.
var leaderOn = map[string]any{"leader": map[string]any{"enabled": true}}

// testDigest is a pipeline digest for the epoch Jobs' --pipeline-digest.
const testDigest = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"

// TestAggregatorServesPipelines: aggregator.pipelines become --pipeline
// flags of the aggregate container, each file read from the public
// ConfigMap's mount; without them the container names no pipeline. The
// container announces them over NATS with its own NKey (--nats).
func TestAggregatorServesPipelines(t *testing.T) {
	for _, files := range [][]any{nil, {"query.yaml"}, {"query.yaml", "click.yaml"}} {
		objs, err := Render("aggregator", map[string]any{"aggregator": map[string]any{"pipelines": files}})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range Containers(objs) {
			if len(c.Args) == 0 || c.Args[0] != "aggregate" {
				continue
			}
			found = true
			// --nats with the role's NKey: devices get the pipelines and
			// report counts announced on crowdlog.pipeline
			if flagArg(c.Args, "--nats") == "" || flagArg(c.Args, "--nats-nkey") == "" {
				t.Errorf("aggregate %v: no --nats and --nats-nkey: devices cannot verify the pipeline", c.Args)
			} else if err := c.Readable(flagArg(c.Args, "--nats-nkey")); err != nil {
				t.Errorf("aggregate --nats-nkey not mounted: %v", err)
			}
			var got []string
			for i, a := range c.Args {
				if a == "--pipeline" && i+1 < len(c.Args) {
					got = append(got, c.Args[i+1])
				}
			}
			if len(got) != len(files) {
				t.Errorf("pipelines %v: --pipeline %v", files, got)
				continue
			}
			for i, f := range files {
				want := "/etc/crowdlog/public/" + f.(string)
				if got[i] != want {
					t.Errorf("pipelines %v: --pipeline %q, want %q", files, got[i], want)
				}
				if err := c.Readable(want); err != nil {
					t.Errorf("pipelines %v: %s not mounted: %v", files, want, err)
				}
			}
		}
		if !found {
			t.Fatalf("pipelines %v: no aggregate container", files)
		}
	}
}

// TestPrio3Aggregators: the Prio3 leader is off by default; enabled, it
// runs at the aggregator operator and the helper at the prio3-helper
// operator, one replica each, each with its own custody: its own keys
// Secret (only its role's key and the custody marker, never the aggregate
// role's Secret), its own NATS credential (the leader's is not the
// aggregator operator's crowdlog-nats), the leader alone with Kafka (user
// prio3-leader, its own Secret), neither with ClickHouse; both read their
// own copy of the verify key from Secret crowdlog-prio3-verify, the
// collector's public key from the public ConfigMap and keep state on a
// claim of their own, written by them alone; every campaign flag is the
// same at both.
func TestPrio3Aggregators(t *testing.T) {
	off, err := Render("aggregator", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Containers(off) {
		if c.Args[0] == "aggregate-prio3" {
			t.Errorf("aggregator operator runs %s by default", c.Name)
		}
	}
	type agg struct {
		op   string
		c    Container
		objs []Object
	}
	found := map[string]agg{}
	for _, op := range []string{"aggregator", "prio3-helper"} {
		objs, err := Render(op, map[string]any{"prio3": leaderOn})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range Containers(objs) {
			switch {
			case c.Args[0] == "aggregate-prio3":
				found[flagArg(c.Args, "--role")] = agg{op, c, objs}
			case c.Name == "aggregate":
				for _, v := range c.Pod.Volumes {
					if v.Name == "keys" && v.Secret.SecretName != "crowdlog-aggregator-keys" {
						t.Errorf("aggregate mounts keys Secret %s", v.Secret.SecretName)
					}
				}
			}
		}
	}
	want := map[string]struct {
		op, name, keys string
		key            []string // private files in the keys Secret
		nats, kafka    string
		flags          []string // file flags the role reads
	}{
		"leader": {"aggregator", "prio3-leader", "crowdlog-prio3-leader-keys", []string{keydir.Prio3LeaderKey, keydir.Prio3LeaderSignKey, keydir.Prio3LeaderTokenSeed},
			"crowdlog-nats-prio3-leader", "crowdlog-kafka-prio3-leader", []string{"--sign-key"}},
		"helper": {"prio3-helper", "prio3-helper", "crowdlog-prio3-helper-keys", []string{keydir.Prio3HelperKey, keydir.Prio3HelperTokenSeed}, "crowdlog-nats", "",
			[]string{"--leader-pub"}},
	}
	for role, w := range want {
		a, ok := found[role]
		if !ok || a.op != w.op || a.c.Name != w.name {
			t.Errorf("--role %s: found %q at %q, want %s at %s", role, a.c.Name, a.op, w.name, w.op)
			continue
		}
		c := a.c
		secrets := map[string]string{} // volume -> Secret
		var keyItems []string
		for _, v := range c.Pod.Volumes {
			if v.Secret != nil {
				secrets[v.Name] = v.Secret.SecretName
				if v.Name == "keys" {
					for _, it := range v.Secret.Items {
						keyItems = append(keyItems, it.Path)
					}
				}
			}
		}
		if wantItems := append(slices.Clone(w.key), keydir.CustodyFile); secrets["keys"] != w.keys || !slices.Equal(keyItems, wantItems) {
			t.Errorf("%s: keys Secret %s items %v, want %s with %v", role, secrets["keys"], keyItems, w.keys, wantItems)
		}
		if secrets["nats"] != w.nats || secrets["kafka"] != w.kafka || secrets["clickhouse"] != "" || secrets["prio3-verify"] != "crowdlog-prio3-verify" {
			t.Errorf("%s: Secrets %v, want NATS %q, Kafka %q, no ClickHouse, verify key crowdlog-prio3-verify", role, secrets, w.nats, w.kafka)
		}
		if u := flagArg(c.Args, "--kafka-sasl-user"); (w.kafka != "") != (u == "prio3-leader") {
			t.Errorf("%s: Kafka user %q", role, u)
		}
		for _, f := range append([]string{"--verify-key", "--collector-pub"}, w.flags...) {
			if err := c.Readable(flagArg(c.Args, f)); err != nil || flagArg(c.Args, f) == "" {
				t.Errorf("%s %s: %v", role, f, err)
			}
		}
		if err := c.Readable(filepath.Join(flagArg(c.Args, "--keys"), w.key[0])); err != nil {
			t.Errorf("%s: its key in --keys: %v", role, err)
		}
		var claim string
		for _, m := range c.VolumeMounts {
			for _, v := range c.Pod.Volumes {
				if m.MountPath == flagArg(c.Args, "--state-dir") && v.Name == m.Name && v.PersistentVolumeClaim != nil && !m.ReadOnly {
					claim = v.PersistentVolumeClaim.ClaimName
				}
			}
		}
		pvc := false
		for _, o := range a.objs {
			pvc = pvc || (o.Kind == "PersistentVolumeClaim" && o.Name == claim)
			if d, ok := o.Value.(*appsv1.Deployment); ok && o.Name == w.name && (d.Spec.Replicas == nil || *d.Spec.Replicas != 1) {
				t.Errorf("%s: replicas %v, want 1 (one writer of its state)", role, d.Spec.Replicas)
			}
		}
		if claim != w.name+"-state" || !pvc {
			t.Errorf("%s: --state-dir on claim %q (created: %v), want its own %s-state", role, claim, pvc, w.name)
		}
	}
	// the helper's namespace reaches DNS and NATS only: no Kafka, no ClickHouse
	var egress []string
	for _, o := range found["helper"].objs {
		if np, ok := o.Value.(*networkingv1.NetworkPolicy); ok {
			for _, e := range np.Spec.Egress {
				for _, to := range e.To {
					if to.NamespaceSelector != nil {
						egress = append(egress, to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
					}
				}
			}
		}
	}
	if want := []string{"kube-system", "crowdlog-nats"}; !slices.Equal(egress, want) {
		t.Errorf("prio3-helper egress to %v, want %v", egress, want)
	}
	rot, err := Render("prio3-helper", map[string]any{"prio3": map[string]any{"rotatedKeys": 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Containers(rot)[0].Pod.Volumes {
		if v.Name != "keys" {
			continue
		}
		var items []string
		for _, it := range v.Secret.Items {
			items = append(items, it.Path)
		}
		if want := []string{keydir.Prio3HelperKey, keydir.Prio3HelperTokenSeed, "prio3-helper.1.key", "prio3-helper.2.key", keydir.CustodyFile}; !slices.Equal(items, want) {
			t.Errorf("rotatedKeys 2: keys items %v, want %v", items, want)
		}
	}
	for _, op := range []string{"aggregator", "prio3-helper"} { // a keyword list file from the public ConfigMap
		kw, err := Render(op, map[string]any{"prio3": map[string]any{"keywordsFile": "campaign.keywords", "leader": map[string]any{"enabled": true}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range Containers(kw) {
			if c.Args[0] != "aggregate-prio3" {
				continue
			}
			if p := flagArg(c.Args, "--keywords"); p != "/etc/crowdlog/public/campaign.keywords" {
				t.Errorf("%s: --keywords %q with keywordsFile", op, p)
			} else if err := c.Readable(p); err != nil {
				t.Errorf("%s: %v", op, err)
			}
		}
	}
	pres, err := Render("prio3-helper", map[string]any{"prio3": map[string]any{"kind": "presence", "maxWeight": 7}})
	if err != nil {
		t.Fatal(err)
	}
	if args := Containers(pres)[0].Args; flagArg(args, "--max-weight") != "7" || flagArg(args, "--bits") != "" {
		t.Errorf("presence: %v, want --max-weight 7 and no --bits", args)
	}
	if len(found) == 2 {
		campaign := func(args []string) []string {
			var out []string
			for _, f := range []string{"--campaign", "--kind", "--bits", "--max-weight", "--keywords", "--min-batch-size", "--grace", "--retain", "--epsilon", "--verify-key", "--key-epoch", "--collector-pub"} {
				out = append(out, f+"="+flagArg(args, f))
			}
			return out
		}
		if l, h := campaign(found["leader"].c.Args), campaign(found["helper"].c.Args); !slices.Equal(l, h) {
			t.Errorf("campaign flags differ:\nleader %v\nhelper %v", l, h)
		}
	}
}

// TestPrio3Issuers: each Prio3 aggregator's operator runs the issuer of its
// own tokens (`issuer --role prio3-leader` beside the leader, only with
// prio3.leader.enabled; `issuer --role prio3-helper` beside the helper),
// with its role's NATS credential (the leader's crowdlog-nats-prio3-leader,
// never the aggregator operator's crowdlog-nats; the helper operator's
// crowdlog-nats), the token seed of its aggregator's keys Secret (the seed
// and custody marker only, mounted file by file into the writable
// in-memory keys directory /var/lib/crowdlog) and the attester's
// enrollment list; no Kafka, no ClickHouse, no claim. No Secret of one
// custodian (aggregate role and its issuer, the Prio3 leader and its
// issuer, the Prio3 helper and its issuer) is mounted by another.
func TestPrio3Issuers(t *testing.T) {
	off, err := Render("aggregator", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Containers(off) {
		if flagArg(c.Args, "--role") == "prio3-leader" {
			t.Errorf("aggregator operator runs %s without prio3.leader.enabled", c.Name)
		}
	}
	want := map[string]struct {
		op, name, keys, seed, nats string
	}{
		"prio3-leader": {"aggregator", "prio3-leader-issuer", "crowdlog-prio3-leader-keys", keydir.Prio3LeaderTokenSeed, "crowdlog-nats-prio3-leader"},
		"prio3-helper": {"prio3-helper", "prio3-helper-issuer", "crowdlog-prio3-helper-keys", keydir.Prio3HelperTokenSeed, "crowdlog-nats"},
	}
	custodian := func(container string) string {
		switch container {
		case "aggregate", "issuer":
			return "aggregator"
		case "prio3-leader", "prio3-leader-issuer":
			return "prio3-leader"
		}
		return container // prio3-helper, prio3-helper-issuer: one operator
	}
	users := map[string]map[string]bool{} // namespace/Secret -> custodians mounting it
	aggNATS := map[string]string{}        // Prio3 aggregator role -> its NATS Secret
	found := map[string]Container{}
	for _, op := range []string{"aggregator", "prio3-helper"} {
		objs, err := Render(op, map[string]any{"prio3": leaderOn})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range Containers(objs) {
			for _, v := range c.Pod.Volumes {
				if v.Secret != nil {
					k := "crowdlog-" + op + "/" + v.Secret.SecretName
					if users[k] == nil {
						users[k] = map[string]bool{}
					}
					users[k][strings.TrimSuffix(custodian(c.Name), "-issuer")] = true
				}
				if v.Name == "nats" && c.Args[0] == "aggregate-prio3" {
					aggNATS["prio3-"+flagArg(c.Args, "--role")] = v.Secret.SecretName
				}
			}
			if c.Args[0] == "issuer" && strings.HasPrefix(flagArg(c.Args, "--role"), "prio3-") {
				if _, dup := found[flagArg(c.Args, "--role")]; dup {
					t.Errorf("two issuers --role %s", flagArg(c.Args, "--role"))
				}
				found[flagArg(c.Args, "--role")] = c
				if w := want[flagArg(c.Args, "--role")]; w.op != op {
					t.Errorf("issuer --role %s at operator %s, want %s", flagArg(c.Args, "--role"), op, w.op)
				}
			}
		}
	}
	for k, us := range users {
		if len(us) > 1 {
			t.Errorf("Secret %s mounted by %v: each custodian has its own", k, slices.Sorted(maps.Keys(us)))
		}
	}
	for role, w := range want {
		c, ok := found[role]
		if !ok {
			t.Errorf("no issuer --role %s", role)
			continue
		}
		if c.Name != w.name || c.Args[0] != "issuer" || c.Args[1] != "--role" || c.Args[2] != role || flagArg(c.Args, "--keys") != "/var/lib/crowdlog" {
			t.Errorf("%s: container %s args %v, want %s: issuer --role %s --keys /var/lib/crowdlog", role, c.Name, c.Args, w.name, role)
		}
		for _, f := range []string{"--kafka", "--clickhouse", "--epoch-length"} {
			if flagArg(c.Args, f) != "" {
				t.Errorf("%s: %s %s (a Prio3 issuer derives each campaign-day's key from its seed; it has no Kafka or ClickHouse)", role, f, flagArg(c.Args, f))
			}
		}
		secrets := map[string]string{}
		var keyItems []string
		state := ""
		for _, v := range c.Pod.Volumes {
			switch {
			case v.Secret != nil:
				secrets[v.Name] = v.Secret.SecretName
				if v.Name == "keys" {
					for _, it := range v.Secret.Items {
						keyItems = append(keyItems, it.Path)
					}
				}
			case v.Name == "state" && v.EmptyDir != nil:
				state = "emptyDir"
			case v.Name == "state":
				state = "other"
			}
		}
		if secrets["nats"] != w.nats || secrets["nats"] != aggNATS[role] {
			t.Errorf("%s: NATS Secret %q, want %q, the one of its aggregator (%q)", role, secrets["nats"], w.nats, aggNATS[role])
		}
		if secrets["keys"] != w.keys || !slices.Equal(keyItems, []string{w.seed, keydir.CustodyFile}) {
			t.Errorf("%s: keys Secret %q items %v, want %s with %s and the custody marker only", role, secrets["keys"], keyItems, w.keys, w.seed)
		}
		if len(secrets) != 2 {
			t.Errorf("%s: Secrets %v, want its NATS credential and its keys only", role, secrets)
		}
		if state != "emptyDir" {
			t.Errorf("%s: /var/lib/crowdlog volume %q, want an emptyDir (the issuer writes its keys directory)", role, state)
		}
		for _, p := range []string{"/var/lib/crowdlog/" + w.seed, "/var/lib/crowdlog/" + keydir.CustodyFile, "/var/lib/crowdlog/issuer.enrolled", flagArg(c.Args, "--nats-nkey")} {
			if err := c.Readable(p); err != nil {
				t.Errorf("%s: %v", role, err)
			}
		}
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/var/lib/crowdlog" && m.ReadOnly {
				t.Errorf("%s: its keys directory is mounted read-only", role)
			}
		}
	}
}
