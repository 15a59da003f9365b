package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/crowdlog/crowdlog/protocol"
)

// Role is a crowdlog process that holds a Kafka credential of its own.
type Role string

// The Kafka roles. Relay a, the randomness service, the issuer and the
// clients have no Kafka credential at all.
const (
	// RoleRelay is relay b, the last hop: it produces sealed reports to
	// reports, PDD blinded vectors to vectors and Prio3 uploads to
	// prio3-uploads.
	RoleRelay Role = "relay"
	// RoleAggregator is `crowdlog aggregate` and `crowdlog aggregate
	// vectors`: reads reports (group crowdlog-aggregator…), writes
	// decrypted, reads vectors (group crowdlog-vectors…) and writes
	// group-sums. It does not write reports: an aggregator that runs an
	// epoch schedule also holds RoleScheduler.
	RoleAggregator Role = "aggregator"
	// RoleScheduler is the right an aggregator running an epoch schedule
	// (`crowdlog aggregate --pipeline` with epoch.length) adds to
	// RoleAggregator: it writes the scheduled open/close control records
	// to reports. Give it to the aggregator's SASL user only when it runs
	// a schedule (`crowdlog topics --acl scheduler=USER`).
	RoleScheduler Role = "scheduler"
	// RoleOperator is the pipeline operator's routine epoch jobs,
	// `crowdlog aggregate open-epoch|close-epoch`: it writes the signed
	// control records to reports (Write implies the Describe their
	// metadata request needs) and nothing else; the admin is kept for
	// `crowdlog topics`.
	RoleOperator Role = "operator"
	// RoleCoordinator is the PDD coordinator: it writes rosters and ticks
	// to vectors.
	RoleCoordinator Role = "coordinator"
	// RoleRelease is `crowdlog release` and `crowdlog release pdd`: reads
	// decrypted, group-sums and prio3-shares, without a consumer group.
	RoleRelease Role = "release"
	// RoleAuditor is `crowdlog aggregate audit`: reads reports and
	// decrypted, without a consumer group.
	RoleAuditor Role = "auditor"
	// RolePrio3Leader is the leader aggregator of PDD's Prio3 mode
	// (`crowdlog aggregate-prio3 --role leader`): reads prio3-uploads
	// partition by partition with the offsets in its own snapshot (no
	// consumer group) and writes both aggregate shares of a collected
	// batch to prio3-shares. The helper aggregator has no Kafka credential
	// (it talks to the leader over NATS only).
	RolePrio3Leader Role = "prio3-leader"
	// RolePrio3Delete is the right a Prio3 leader running with
	// --delete-applied-uploads adds to RolePrio3Leader: it deletes the
	// records of prio3-uploads its snapshots have passed (DeleteRecords,
	// KIP-107, which Kafka authorizes as Delete on the topic). Give it to
	// the leader's SASL user only when the option is on (`crowdlog topics
	// --acl prio3-delete=USER`).
	RolePrio3Delete Role = "prio3-delete"
)

// Roles lists every Role, in the order of the ACL table.
var Roles = []Role{RoleRelay, RoleAggregator, RoleScheduler, RoleOperator, RoleCoordinator, RoleRelease, RoleAuditor, RolePrio3Leader, RolePrio3Delete}

// Grant is one row of the ACL table: Role may do Op on the resource
// (a topic or a consumer group; Prefixed: every name starting with Name;
// Delete on a topic is what DeleteRecords needs).
// Kafka implies Describe by Read and Write (KIP-253), which is what
// metadata, offset and group-coordinator requests need. No role needs
// IdempotentWrite or a transactional id: kafka-go's writers are neither
// idempotent nor transactional.
type Grant struct {
	Role     Role
	Resource kafkago.ResourceType // ResourceTypeTopic or ResourceTypeGroup
	Name     string
	Prefixed bool
	Op       kafkago.ACLOperationType // ACLOperationTypeRead, ACLOperationTypeWrite or ACLOperationTypeDelete
	// Why says which code path needs it.
	Why string
}

// ACLTable is every permission a crowdlog role has on Kafka: the one
// table ApplyACLs applies to a real cluster, Config.Users seeds into a
// local broker and docs/operations.md prints (ACLTableMarkdown).
// Everything not in it is denied once the cluster authorizes (Kafka's
// allow.everyone.if.no.acl.found=false), except for the admin, a super
// user that creates topics, sets retention and applies these ACLs.
var ACLTable = []Grant{
	{RoleRelay, kafkago.ResourceTypeTopic, protocol.ReportsTopic, false, kafkago.ACLOperationTypeWrite, "sealed reports of the last hop"},
	{RoleRelay, kafkago.ResourceTypeTopic, protocol.VectorsTopic, false, kafkago.ACLOperationTypeWrite, "PDD blinded vectors of the last hop"},
	{RoleRelay, kafkago.ResourceTypeTopic, protocol.Prio3UploadsTopic, false, kafkago.ACLOperationTypeWrite, "Prio3 uploads of the last hop"},

	{RoleAggregator, kafkago.ResourceTypeTopic, protocol.ReportsTopic, false, kafkago.ACLOperationTypeRead, "aggregator: sealed reports"},
	{RoleAggregator, kafkago.ResourceTypeGroup, "crowdlog-aggregator", true, kafkago.ACLOperationTypeRead, "aggregator: consumer group (--group)"},
	{RoleAggregator, kafkago.ResourceTypeTopic, protocol.DecryptedTopic, false, kafkago.ACLOperationTypeWrite, "aggregator: decrypted reports"},
	{RoleAggregator, kafkago.ResourceTypeTopic, protocol.VectorsTopic, false, kafkago.ACLOperationTypeRead, "aggregate vectors: blinded vectors"},
	{RoleAggregator, kafkago.ResourceTypeGroup, "crowdlog-vectors", true, kafkago.ACLOperationTypeRead, "aggregate vectors: consumer group"},
	{RoleAggregator, kafkago.ResourceTypeTopic, protocol.GroupSumsTopic, false, kafkago.ACLOperationTypeWrite, "aggregate vectors: group outcomes"},

	{RoleScheduler, kafkago.ResourceTypeTopic, protocol.ReportsTopic, false, kafkago.ACLOperationTypeWrite, "scheduled epoch open/close control records (an aggregator with an epoch schedule)"},

	{RoleOperator, kafkago.ResourceTypeTopic, protocol.ReportsTopic, false, kafkago.ACLOperationTypeWrite, "epoch open/close control records (`aggregate open-epoch`, `close-epoch`)"},

	{RoleCoordinator, kafkago.ResourceTypeTopic, protocol.VectorsTopic, false, kafkago.ACLOperationTypeWrite, "PDD rosters and ticks"},

	{RoleRelease, kafkago.ResourceTypeTopic, protocol.DecryptedTopic, false, kafkago.ACLOperationTypeRead, "release: decrypted reports"},
	{RoleRelease, kafkago.ResourceTypeTopic, protocol.GroupSumsTopic, false, kafkago.ACLOperationTypeRead, "release pdd: group outcomes"},
	{RoleRelease, kafkago.ResourceTypeTopic, protocol.Prio3SharesTopic, false, kafkago.ACLOperationTypeRead, "release pdd (prio3): aggregate shares"},

	{RoleAuditor, kafkago.ResourceTypeTopic, protocol.ReportsTopic, false, kafkago.ACLOperationTypeRead, "audit: reports"},
	{RoleAuditor, kafkago.ResourceTypeTopic, protocol.DecryptedTopic, false, kafkago.ACLOperationTypeRead, "audit: decrypted"},

	{RolePrio3Leader, kafkago.ResourceTypeTopic, protocol.Prio3UploadsTopic, false, kafkago.ACLOperationTypeRead, "prio3 leader: uploads (partitions read directly, offsets in its snapshot; no group)"},
	{RolePrio3Leader, kafkago.ResourceTypeTopic, protocol.Prio3SharesTopic, false, kafkago.ACLOperationTypeWrite, "prio3 leader: both aggregate shares of a collected batch"},

	{RolePrio3Delete, kafkago.ResourceTypeTopic, protocol.Prio3UploadsTopic, false, kafkago.ACLOperationTypeDelete, "prio3 leader with --delete-applied-uploads: DeleteRecords below the offsets its snapshots passed"},
}

// GrantsOf returns the rows of ACLTable for role, in table order.
func GrantsOf(role Role) []Grant {
	var out []Grant
	for _, g := range ACLTable {
		if g.Role == role {
			out = append(out, g)
		}
	}
	return out
}

// ACLEntries returns the Kafka ACL entries (ALLOW, any host) of
// ACLTable for the roles in principals, principal "User:<name>" with the
// SASL user name principals gives the role; roles missing from principals
// get none. Sorted by principal, then table order.
func ACLEntries(principals map[Role]string) []kafkago.ACLEntry {
	var out []kafkago.ACLEntry
	roles := make([]Role, 0, len(principals))
	for r := range principals {
		roles = append(roles, r)
	}
	sort.Slice(roles, func(i, j int) bool { return principals[roles[i]] < principals[roles[j]] })
	for _, r := range roles {
		for _, g := range GrantsOf(r) {
			pat := kafkago.PatternTypeLiteral
			if g.Prefixed {
				pat = kafkago.PatternTypePrefixed
			}
			out = append(out, kafkago.ACLEntry{ResourceType: g.Resource, ResourceName: g.Name, ResourcePatternType: pat,
				Principal: "User:" + principals[r], Host: "*", Operation: g.Op, PermissionType: kafkago.ACLPermissionTypeAllow})
		}
	}
	return out
}

// ApplyACLs creates, at the broker addr, the ACL entries of ACLEntries
// (principals: role → SASL user name), authenticated with AuthFrom(ctx),
// which must be a user allowed to Alter the cluster (a super user). It is
// idempotent: Kafka keeps one copy of an entry created twice. It does not
// delete entries that are not in the table. Errors name the entry the
// broker refused, or the broker that could not be reached.
func ApplyACLs(ctx context.Context, addr string, principals map[Role]string) error {
	for r, u := range principals {
		if u == "" || strings.ContainsAny(u, ":,* ") {
			return fmt.Errorf("kafka: ACLs: user name %q of role %s: want a plain SASL user name", u, r)
		}
	}
	entries := ACLEntries(principals)
	if len(entries) == 0 {
		return nil
	}
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	resp, err := cl.CreateACLs(ctx, &kafkago.CreateACLsRequest{ACLs: entries})
	if err != nil {
		return fmt.Errorf("kafka: create ACLs at %s: %w (is the broker running, and is the admin credential a super user?)", addr, err)
	}
	var errs []error
	for i, e := range resp.Errors {
		if e != nil && i < len(entries) {
			x := entries[i]
			errs = append(errs, fmt.Errorf("kafka: ACL %s %v on %s %q: %w (the admin credential must be a super user or hold Alter on the cluster)",
				x.Principal, x.Operation, resourceName(x.ResourceType), x.ResourceName, e))
		}
	}
	return errors.Join(errs...)
}

func resourceName(t kafkago.ResourceType) string {
	switch t {
	case kafkago.ResourceTypeTopic:
		return "topic"
	case kafkago.ResourceTypeGroup:
		return "group"
	case kafkago.ResourceTypeCluster:
		return "cluster"
	}
	return fmt.Sprint(int(t))
}

func opName(op kafkago.ACLOperationType) string {
	switch op {
	case kafkago.ACLOperationTypeRead:
		return "Read"
	case kafkago.ACLOperationTypeWrite:
		return "Write"
	case kafkago.ACLOperationTypeDelete:
		return "Delete"
	}
	return fmt.Sprint(int(op))
}

// kfakeACLs is ACLTable's rows for roles as kfake seeds them (kfake.User).
func kfakeACLs(roles ...Role) []kfake.ACL {
	var grants []Grant
	for _, r := range roles {
		grants = append(grants, GrantsOf(r)...)
	}
	var out []kfake.ACL
	for _, g := range grants {
		pat := kmsg.ACLResourcePatternTypeLiteral
		if g.Prefixed {
			pat = kmsg.ACLResourcePatternTypePrefixed
		}
		// kafka-go's and kmsg's enums are both Kafka's wire values
		out = append(out, kfake.ACL{Resource: kmsg.ACLResourceType(g.Resource), Name: g.Name, Pattern: pat,
			Operation: kmsg.ACLOperation(g.Op), Allow: true})
	}
	return out
}

// ACLTableMarkdown renders ACLTable as the Markdown table of
// docs/operations.md: role, operation, resource, name, why.
func ACLTableMarkdown() string {
	var b strings.Builder
	b.WriteString("| role | operation | resource | name | for |\n|---|---|---|---|---|\n")
	for _, g := range ACLTable {
		name := "`" + g.Name + "`"
		if g.Prefixed {
			name = "`" + g.Name + "`… (prefix)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", g.Role, opName(g.Op), resourceName(g.Resource), name, g.Why)
	}
	return b.String()
}
