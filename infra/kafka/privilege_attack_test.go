package kafka

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
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

// privilegeTopics are the topics the attack reads and writes.
var privilegeTopics = []string{protocol.ReportsTopic, protocol.DecryptedTopic, protocol.VectorsTopic, protocol.GroupSumsTopic,
	protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic}

// privilegeOps are every operation the attack tries.
func privilegeOps() []privilegeOp {
	var ops []privilegeOp
	for _, t := range privilegeTopics {
		ops = append(ops, privilegeOp{"read", t}, privilegeOp{"write", t})
	}
	for _, g := range []string{"crowdlog-aggregator", "crowdlog-vectors", "crowdlog-release"} {
		ops = append(ops, privilegeOp{"group", g})
	}
	return append(ops, privilegeOp{"acl", "User:anyone"})
}

// leastPrivilege is what each principal of the attack needs, written
// out independently of ACLTable (docs/operations.md, Kafka ACLs): the
// operations ("read T", "write T", "group G") its code paths use. A row
// of ACLTable beyond it is what the attack finds.
var leastPrivilege = map[string][]string{
	"relay": {"write reports", "write vectors", "write prio3-uploads"},
	"aggregator": {"read reports", "group crowdlog-aggregator", "write decrypted",
		"read vectors", "group crowdlog-vectors", "write group-sums"},
	"aggregator+schedule": {"read reports", "group crowdlog-aggregator", "write decrypted",
		"read vectors", "group crowdlog-vectors", "write group-sums", "write reports"},
	"operator":     {"write reports"},
	"coordinator":  {"write vectors"},
	"release":      {"read decrypted", "read group-sums", "read prio3-shares"},
	"auditor":      {"read reports", "read decrypted"},
	"prio3-leader": {"read prio3-uploads", "write prio3-shares"},
	"client":       nil,
}

// tryOp runs op as the Auth of ctx at addr (Try): nil when the broker
// let it through.
func tryOp(ctx context.Context, addr string, op privilegeOp) error {
	kind := map[string]Operation{"read": {"Read", "topic", op.name}, "write": {"Write", "topic", op.name},
		"group": {"Describe", "group", op.name}, "acl": {"Alter", "cluster", ""}}
	return Try(ctx, addr, kind[op.kind])
}

// privilegePrincipal is a credential of the attack and the roles of
// ACLTable its credential is seeded with.
type privilegePrincipal struct {
	name  string
	cred  Credential
	roles []Role
}

// runPrivilege starts a kfake broker with TLS, SASL/SCRAM and ACLs seeded
// from table (ACLTable for the run), every principal's credential seeded
// with its roles' rows (seed: role → credential names), and has each
// principal try every operation. It returns, per principal, the
// operations that succeeded outside leastPrivilege (forbidden) and the
// ones in it that failed (denied).
func runPrivilege(t *testing.T, ctx context.Context, table []Grant, principals []privilegePrincipal, seed map[string][]Role, admin Credential) (forbidden, denied map[string][]string) {
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
	if err := EnsureTopics(as(admin), b.Addr, 2, privilegeTopics...); err != nil {
		t.Fatal(err)
	}
	forbidden, denied = map[string][]string{}, map[string][]string{}
	for _, p := range principals {
		for _, op := range privilegeOps() {
			err := tryOp(as(p.cred), b.Addr, op)
			allowed := slices.Contains(leastPrivilege[p.name], op.String())
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
// auditor, the Prio3 leader and a client — tries every operation: Read
// and Write on reports, decrypted, vectors, group-sums, prio3-uploads and
// prio3-shares, the coordinator of the
// groups crowdlog-aggregator, crowdlog-vectors and crowdlog-release, and
// creating an ACL. No operation beyond what it needs (leastPrivilege,
// written out apart from the table) succeeds — the operator writes
// reports only; the aggregator writes reports only with the scheduler
// role — and every one it needs does. The control is the table
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
		{"prio3-leader", cred("prio3-leader"), []Role{RolePrio3Leader}},
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
	fmt.Printf("ATTACK kafka-least-privilege: %d of %d operations beyond what a principal needs succeeded (%d principals × %d operations: Read/Write on %d topics, 3 group coordinators, CreateACLs), %d it needs refused; the aggregator without a schedule wrote reports %d times, the epoch jobs' credential did %d operations beyond Write on reports; control with the table before the operator role (aggregator with Write on reports, epoch jobs as admin): %d forbidden operations succeeded (aggregator wrote reports: %v; epoch jobs as admin: %d of %d)\n",
		count(forbidden), len(fixed)*ops, len(fixed), ops, len(privilegeTopics), count(denied), len(forbidden["aggregator"]), len(forbidden["operator"]),
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
