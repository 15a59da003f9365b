package kafka

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/tlstest"
	"github.com/crowdlog/crowdlog/protocol"
)

// privilegeOp is one operation a principal tries: Read or Write on a
// topic, Describe of a consumer group (its coordinator: the first step of
// joining it or reading its offsets), or creating an ACL.
type privilegeOp struct {
	kind string // "read", "write", "group", "acl"
	name string
}

func (o privilegeOp) String() string { return o.kind + " " + o.name }

// privilegeOps are every operation the attack tries.
func privilegeOps() []privilegeOp {
	var ops []privilegeOp
	for _, t := range []string{protocol.ReportsTopic, protocol.DecryptedTopic, protocol.VectorsTopic, protocol.GroupSumsTopic} {
		ops = append(ops, privilegeOp{"read", t}, privilegeOp{"write", t})
	}
	for _, g := range []string{"crowdlog-aggregator", "crowdlog-vectors", "crowdlog-release"} {
		ops = append(ops, privilegeOp{"group", g})
	}
	return append(ops, privilegeOp{"acl", "User:anyone"})
}

// allowedBy reports whether op is in the rows of roles in table: Read
// or Write on the topic, Read on the group (Kafka implies Describe).
func allowedBy(table []Grant, roles []Role, op privilegeOp) bool {
	for _, g := range table {
		if slices.Contains(roles, g.Role) {
			switch {
			case op.kind == "read" && g.Resource == kafkago.ResourceTypeTopic && g.Op == kafkago.ACLOperationTypeRead && g.Name == op.name,
				op.kind == "write" && g.Resource == kafkago.ResourceTypeTopic && g.Op == kafkago.ACLOperationTypeWrite && g.Name == op.name,
				op.kind == "group" && g.Resource == kafkago.ResourceTypeGroup && (op.name == g.Name || g.Prefixed && strings.HasPrefix(op.name, g.Name)):
				return true
			}
		}
	}
	return false
}

// tryOp runs op as the Auth of ctx at addr: nil when the broker let it
// through.
func tryOp(ctx context.Context, addr string, op privilegeOp) error {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch op.kind {
	case "read":
		_, err := fetchAll(octx, addr, op.name, 2)
		return err
	case "write":
		return produce(octx, addr, op.name, kafkago.Message{Value: []byte(`{"op":"close-epoch","app":"query","epoch":"e1"}`)})
	case "group":
		cl := clientCtx(octx, addr)
		defer closeTransport(cl)
		resp, err := cl.FindCoordinator(octx, &kafkago.FindCoordinatorRequest{Key: op.name, KeyType: kafkago.CoordinatorKeyTypeConsumer})
		if err == nil {
			err = resp.Error
		}
		return err
	default:
		return ApplyACLs(octx, addr, map[Role]string{RoleRelease: "anyone"})
	}
}

// privilegePrincipal is a credential of the attack and the roles its rows
// come from after the fix (what it may do).
type privilegePrincipal struct {
	name  string
	cred  Credential
	roles []Role
}

// runPrivilege starts a kfake broker with TLS, SASL/SCRAM and ACLs seeded
// from table (ACLTable for the run), every principal's credential seeded
// with its roles' rows (seed: role → credential names), and has each
// principal try every operation. It returns, per principal, the
// operations that succeeded outside its row under the fixed table
// (forbidden) and the ones of its row that failed (denied).
func runPrivilege(t *testing.T, ctx context.Context, table []Grant, principals []privilegePrincipal, seed map[string][]Role, admin Credential) (forbidden, denied map[string][]string) {
	fixedTable := ACLTable
	saved := ACLTable
	ACLTable = table
	defer func() { ACLTable = saved }()
	dir := t.TempDir()
	srvTLS, caFile := tlstest.TLS(t, dir)
	cfg := Config{Dir: filepath.Join(dir, "kafka"), Partitions: 2, TLS: srvTLS, Admin: &admin, ACLs: true}
	for _, p := range principals {
		if p.cred.User == admin.User {
			continue
		}
		for _, r := range seed[p.name] {
			cfg.Users = append(cfg.Users, User{Role: r, Credential: p.cred})
		}
		if len(seed[p.name]) == 0 {
			cfg.Users = append(cfg.Users, User{Credential: p.cred})
		}
	}
	b, err := cfg.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	as := func(c Credential) context.Context {
		a, err := c.AuthConfig(caFile).Load()
		if err != nil {
			t.Fatal(err)
		}
		return WithAuth(ctx, a)
	}
	if err := EnsureTopics(as(admin), b.Addr, 2, protocol.ReportsTopic, protocol.DecryptedTopic, protocol.VectorsTopic, protocol.GroupSumsTopic); err != nil {
		t.Fatal(err)
	}
	forbidden, denied = map[string][]string{}, map[string][]string{}
	for _, p := range principals {
		for _, op := range privilegeOps() {
			err := tryOp(as(p.cred), b.Addr, op)
			allowed := allowedBy(fixedTable, p.roles, op)
			switch {
			case err == nil && !allowed:
				forbidden[p.name] = append(forbidden[p.name], op.String())
			case err != nil && allowed:
				denied[p.name] = append(denied[p.name], op.String()+": "+err.Error())
			}
		}
	}
	return forbidden, denied
}

// TestAttackKafkaLeastPrivilege (docs/threat-model.md, Kafka roles): on a
// kfake broker with TLS, SASL/SCRAM and the ACL table, every principal —
// relay b, the aggregator without and with an epoch schedule, the
// pipeline operator's epoch jobs, the coordinator, the release, the
// auditor and a client — tries every operation: Read and Write on
// reports, decrypted, vectors and group-sums, the coordinator of the
// groups crowdlog-aggregator, crowdlog-vectors and crowdlog-release, and
// creating an ACL. No operation outside its row succeeds (the operator
// writes reports only; the aggregator writes reports only with the
// scheduler role), and every one in it does. The control is the table
// before the operator role (the aggregator with Write on reports, the
// epoch jobs as the admin super user): there the aggregator without a
// schedule writes a forged control record to reports, and the epoch jobs'
// credential reads reports and decrypted, writes every topic, reaches
// every group and creates ACLs.
func TestAttackKafkaLeastPrivilege(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := Credential{MechanismSCRAMSHA512, "admin", "admin-secret"}
	cred := func(u string) Credential { return Credential{MechanismSCRAMSHA512, u, u + "-secret"} }
	fixed := []privilegePrincipal{
		{"relay", cred("relay-b"), []Role{RoleRelay}},
		{"aggregator", cred("aggregator"), []Role{RoleAggregator}},
		{"aggregator+schedule", cred("aggregator-s"), []Role{RoleAggregator, RoleScheduler}},
		{"operator", cred("operator"), []Role{RoleOperator}},
		{"coordinator", cred("coordinator"), []Role{RoleCoordinator}},
		{"release", cred("release"), []Role{RoleRelease}},
		{"auditor", cred("auditor"), []Role{RoleAuditor}},
		{"client", cred("client-7"), nil},
	}
	seed := map[string][]Role{}
	for _, p := range fixed {
		seed[p.name] = p.roles
	}
	forbidden, denied := runPrivilege(t, ctx, ACLTable, fixed, seed, admin)

	// the control: the table before the operator role, the epoch jobs as
	// the admin, judged against the fixed rows
	var before []Grant
	for _, g := range ACLTable {
		if g.Role != RoleOperator && g.Role != RoleScheduler {
			before = append(before, g)
		}
	}
	before = append(before, Grant{RoleAggregator, kafkago.ResourceTypeTopic, protocol.ReportsTopic, false, kafkago.ACLOperationTypeWrite, "epoch open/close control records"})
	control := slices.Clone(fixed)
	for i := range control {
		if control[i].name == "operator" {
			control[i].cred = admin
		}
	}
	cseed := map[string][]Role{}
	for _, p := range control {
		cseed[p.name] = slices.DeleteFunc(slices.Clone(p.roles), func(r Role) bool { return r == RoleScheduler || r == RoleOperator })
	}
	cforbidden, _ := runPrivilege(t, ctx, before, control, cseed, admin)

	ops := len(privilegeOps())
	count := func(m map[string][]string) int {
		n := 0
		for _, v := range m {
			n += len(v)
		}
		return n
	}
	fmt.Printf("ATTACK kafka-least-privilege: %d of %d operations outside a principal's row succeeded (8 principals × %d operations: Read/Write on 4 topics, 3 group coordinators, CreateACLs), %d of its row refused; the aggregator without a schedule wrote reports %d times, the epoch jobs' credential did %d operations beyond Write on reports; control with the table before the operator role (aggregator with Write on reports, epoch jobs as admin): %d forbidden operations succeeded (aggregator wrote reports: %v; epoch jobs as admin: %d of %d)\n",
		count(forbidden), 8*ops, ops, count(denied), len(forbidden["aggregator"]), len(forbidden["operator"]),
		count(cforbidden), slices.Contains(cforbidden["aggregator"], "write "+protocol.ReportsTopic), len(cforbidden["operator"]), ops-1)
	if count(forbidden) != 0 {
		t.Errorf("operations outside a principal's row succeeded: %v", forbidden)
	}
	if count(denied) != 0 {
		t.Errorf("operations of a principal's row refused: %v", denied)
	}
	if !slices.Contains(cforbidden["aggregator"], "write "+protocol.ReportsTopic) || len(cforbidden["operator"]) != ops-1 {
		t.Errorf("control (the table before): forbidden successes %v; want the aggregator writing reports and the admin doing everything", cforbidden)
	}
}
