package natsauth

import (
	"slices"
	"strings"

	"github.com/crowdlog/crowdlog/protocol"
)

// The NATS accounts of the generated configuration (ServerConfig.Text).
//
// Every role lives in an account of its own (AccountOf): the clients'
// account ClientAccount, and "CROWDLOG_" + the role's name for the
// others. The roles that own JetStream state (JetStreamRoles: each relay,
// the randomness service, the issuer, the PDD coordinator) own it in
// their own account; nothing else has JetStream. Accounts meet only
// through the service exports and imports of Services (requests, one
// response each; relay a's and relay b's inboxes are JetStream publishes
// whose acknowledgement is that response) and of the JetStream API
// subjects the admin and operator roles use (AdminAPI, OperatorAPI;
// imported under JSAPIPrefix). A subject a role names, a reply subject
// or a push consumer's deliver subject included, is a subject of its own
// account: it reaches another account only where that account exported
// it, so no publish, JetStream acknowledgement or consumer delivery lands
// in another operator's stream or bucket.

// ClientAccount is the NATS account of the client credential: no
// JetStream, only the imports of Services whose importers include Client.
const ClientAccount = "CROWDLOG_CLIENTS"

// AccountOf returns the NATS account of role r in the generated
// configuration: ClientAccount for Client, else "CROWDLOG_" + r in upper
// case with "-" as "_" (relay-a: CROWDLOG_RELAY_A).
func AccountOf(r Role) string {
	if r == Client {
		return ClientAccount
	}
	return "CROWDLOG_" + strings.ToUpper(strings.ReplaceAll(string(r), "-", "_"))
}

// JetStreamRoles are the roles whose account has JetStream and holds
// their streams and key-value buckets (Streams).
var JetStreamRoles = []Role{RelayA, RelayB, Randomness, Issuer, Coordinator, Prio3Helper, Prio3Leader}

// Streams returns the JetStream streams in the account of role r, all
// created by the admin step (`crowdlog streams`): a relay's inbox stream
// (protocol.RelayStream, capturing only its own inbox subject), the
// randomness service's spent-token bucket and randomness-token counters,
// the issuer's counters, the coordinator's two buckets and active index;
// nil for a role without JetStream.
func Streams(r Role) []string {
	switch r {
	case RelayA, RelayB:
		return []string{protocol.RelayStream}
	case Randomness:
		return []string{"KV_" + protocol.SpentTokensBucket, "KV_" + protocol.IssuerRandomnessCountersBucket}
	case Issuer:
		return []string{"KV_" + protocol.IssuerCountersBucket}
	case Coordinator:
		return []string{"KV_" + protocol.PDDBucket, "KV_" + protocol.PDDRoundsBucket, protocol.PDDActiveStream}
	case Prio3Helper:
		return []string{"KV_" + protocol.IssuerPrio3HelperCountersBucket}
	case Prio3Leader:
		return []string{"KV_" + protocol.IssuerPrio3LeaderCountersBucket}
	}
	return nil
}

// RelayName returns the relay name of a relay role ("a" for RelayA) and
// whether r is one.
func RelayName(r Role) (string, bool) {
	if r != RelayA && r != RelayB {
		return "", false
	}
	return string(r[len("relay-"):]), true
}

// JSAPIPrefix is the JetStream API prefix ("$JS.<account>.API") under
// which the admin and operator accounts import the JetStream API subjects
// of owner's account (AdminAPI, OperatorAPI): a client of those accounts
// reaches owner's streams with jetstream.NewWithAPIPrefix(nc,
// JSAPIPrefix(owner)).
func JSAPIPrefix(owner Role) string { return "$JS." + AccountOf(owner) + ".API" }

// imported maps a JetStream API subject of owner's account ("$JS.API.…")
// to the subject the importing account uses (JSAPIPrefix(owner) + ".…").
func imported(owner Role, subj string) string {
	return JSAPIPrefix(owner) + strings.TrimPrefix(subj, "$JS.API")
}

// AdminAPI returns the JetStream API subjects ("$JS.API.…", as in owner's
// account) that owner's account exports to the admin's account: look up,
// create and update each stream of Streams(owner) (never delete or
// purge), and, for a relay, create its durable consumer (filtered to its
// own inbox; the filter is part of the create subject; looking it up is
// the operator's, OperatorAPI);
// and the account's JetStream info, which nats.go's key-value create
// asks first (read-only: limits and usage).
func AdminAPI(owner Role) []string {
	if len(Streams(owner)) == 0 {
		return nil
	}
	out := []string{jsInfo}
	for _, s := range Streams(owner) {
		out = append(out, streamAdmin(s)...)
	}
	if name, ok := RelayName(owner); ok {
		s, c := protocol.RelayStream, protocol.RelayConsumerName(name)
		out = append(out, "$JS.API.CONSUMER.CREATE."+s+"."+c+"."+protocol.RelaySubject(name))
	}
	return out
}

// OperatorAPI returns the JetStream API subjects ("$JS.API.…") that a
// relay's account exports to the operator's account: look the relay
// stream and the relay's consumer up (its backlog); nil for other roles.
func OperatorAPI(owner Role) []string {
	name, ok := RelayName(owner)
	if !ok {
		return nil
	}
	return []string{streamInfo(protocol.RelayStream), "$JS.API.CONSUMER.INFO." + protocol.RelayStream + "." + protocol.RelayConsumerName(name)}
}

// Service is one subject an account exports as a service (one response
// per request) and the accounts of Importers import under the same name.
type Service struct {
	// Subject is a literal subject (no wildcard).
	Subject string
	// Owner is the role that answers it (or, for a relay inbox, owns the
	// stream that captures it).
	Owner Role
	// Importers are the roles that send to it.
	Importers []Role
}

// Services are every subject one role's account offers another's: relay
// a's inbox to the clients and relay b's to relay a (JetStream publishes,
// acknowledged through the import), the relays' key announcements, the
// randomness service's and issuers' request and public-key subjects, the
// coordinator's client subjects, advance (the operator) and recovery (the
// aggregator), the aggregators' pipeline announcement to the clients, and
// the Prio3 helper's subject (the leader only).
func Services() []Service {
	return []Service{
		{protocol.RelaySubject("a"), RelayA, []Role{Client}},
		{protocol.RelaySubject("b"), RelayB, []Role{RelayA}},
		{protocol.RelayKeysSubject("a"), RelayA, []Role{Client}},
		{protocol.RelayKeysSubject("b"), RelayB, []Role{Client}},
		{protocol.RandomnessSubject, Randomness, []Role{Client}},
		{protocol.RandomnessPublicKeySubject, Randomness, []Role{Client}},
		{protocol.IssuerRandomnessSubject, Randomness, []Role{Client}},
		{protocol.IssuerRandomnessPublicKeySubject, Randomness, []Role{Client}},
		{protocol.IssuerSubject, Issuer, []Role{Client}},
		{protocol.IssuerPublicKeySubject, Issuer, []Role{Client}},
		{protocol.PDDRegisterSubject, Coordinator, []Role{Client}},
		{protocol.PDDPingSubject, Coordinator, []Role{Client}},
		{protocol.PDDDepositSubject, Coordinator, []Role{Client}},
		{protocol.PDDBundlesSubject, Coordinator, []Role{Client}},
		{protocol.PDDAdvanceSubject, Coordinator, []Role{Operator}},
		{protocol.PDDRecoverySubject, Coordinator, []Role{Aggregator}},
		{protocol.PipelineSubject, Aggregator, []Role{Client}},
		{protocol.Prio3HelperSubject, Prio3Helper, []Role{Prio3Leader}},
		{protocol.IssuerPrio3HelperSubject, Prio3Helper, []Role{Client}},
		{protocol.IssuerPrio3HelperPublicKeySubject, Prio3Helper, []Role{Client}},
		{protocol.Prio3SettingsSubject, Prio3Leader, []Role{Client}},
		{protocol.IssuerPrio3LeaderSubject, Prio3Leader, []Role{Client}},
		{protocol.IssuerPrio3LeaderPublicKeySubject, Prio3Leader, []Role{Client}},
	}
}

// export is one export of an account: a subject and the accounts that
// may import it.
type export struct {
	subject  string
	accounts []string
}

// importEntry is one import of an account: the exporter's account, its
// subject and the local subject ("to"; equal to subject for Services).
type importEntry struct {
	account, subject, to string
}

// exportsOf returns the exports of r's account, in a fixed order.
func exportsOf(r Role) []export {
	var out []export
	for _, s := range Services() {
		if s.Owner != r {
			continue
		}
		var accts []string
		for _, i := range s.Importers {
			accts = append(accts, AccountOf(i))
		}
		out = append(out, export{s.Subject, accts})
	}
	admin, op := AdminAPI(r), OperatorAPI(r)
	for _, subj := range admin {
		accts := []string{AccountOf(Admin)}
		if slices.Contains(op, subj) {
			accts = append(accts, AccountOf(Operator))
		}
		out = append(out, export{subj, accts})
	}
	for _, subj := range op {
		if !slices.Contains(admin, subj) {
			out = append(out, export{subj, []string{AccountOf(Operator)}})
		}
	}
	return out
}

// importsOf returns the imports of r's account, in a fixed order.
func importsOf(r Role) []importEntry {
	var out []importEntry
	for _, s := range Services() {
		if slices.Contains(s.Importers, r) {
			out = append(out, importEntry{AccountOf(s.Owner), s.Subject, s.Subject})
		}
	}
	for _, owner := range JetStreamRoles {
		var subjects []string
		switch r {
		case Admin:
			subjects = AdminAPI(owner)
		case Operator:
			subjects = OperatorAPI(owner)
		}
		for _, subj := range subjects {
			out = append(out, importEntry{AccountOf(owner), subj, imported(owner, subj)})
		}
	}
	return out
}
