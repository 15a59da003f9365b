// Package natsauth is crowdlog's NATS authorization in one place: the
// subject-permission table of every role (Table), the NATS server
// configuration generated from it (ServerConfig.Text: an account per role
// with its NKey user, its publish/subscribe permissions and the service
// exports and imports between accounts, TLS), and the
// per-role NKey files (GenerateNKey, PublicKeys).
//
// Every role connects with its own NKey (Ed25519, nats-io/nkeys; the seed
// file stays with the role's operator, the server config holds only the
// public key) and may publish only what its row allows; everything else is
// refused by the server ("Permissions Violation"). Replies go to the
// role's own inbox prefix (InboxPrefix), so one role cannot read the
// replies addressed to another. Responders (relays, randomness, issuer,
// coordinator) answer through allow_responses: they may publish to a reply
// subject only while answering a request they received. nats-server never
// checks the reply subject a requester names, and allow_responses lets the
// answer through whatever the subject (a publish deny list included), so
// two more rules keep a requester from steering an answer onto a stream
// or bucket: every role's credential lives in an account of its own
// (AccountOf; the clients' is ClientAccount, without JetStream), and
// accounts reach each other only through the service imports of Services
// and the JetStream API imports of the admin and the operator; a reply
// subject a role names is therefore a subject of its own account, for a
// responder's answer and for JetStream's PubAck alike, and so is the
// deliver subject of a consumer it creates (accounts.go). And every
// responder answers through natsconn.Respond, which answers only
// requester inboxes ("_INBOX.", and "_R_." of a service import) and
// counts the rest.
//
// Clients share one credential, so the server cannot tell one device from
// another: each client connection uses an inbox prefix of its own
// (natsconn.ClientInboxPrefix, 130 random bits), and "_INBOX.client.>"
// may not be subscribed, but a subscription to "_INBOX.client.*.>" fits
// the allow rule (NATS matches a permission against the subscription's
// tokens, "*" included) and sees every client's replies. Client replies
// (issuer refusals and counts, PDD register ids) must stay non-secret.
//
// The docs (docs/operations.md), `crowdlog nats-config` (the file an
// operator gives nats-server -c) and the embedded server of `crowdlog run`
// all use this table.
package natsauth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/crowdlog/crowdlog/protocol"
)

// Role names one NATS credential: a role of docs/threat-model.md that
// talks to NATS.
type Role string

// The roles with a NATS credential.
const (
	// Client: every reporting device (one shared credential; clients are
	// anonymous by design, and the issuer's tokens limit each identity).
	Client Role = "client"
	// RelayA and RelayB: the two relays of the onion route a → b.
	RelayA Role = "relay-a"
	RelayB Role = "relay-b"
	// Randomness: the OPRF service and its spent-token bucket.
	Randomness Role = "randomness"
	// Issuer: the Privacy Pass issuer and its counters bucket: on a
	// single host every kind; with custody split by verifier the
	// aggregator operator's issuer (report tokens, ARC credentials; the
	// chart's aggregator release holds this credential). The randomness
	// operator's issuer connects as Randomness.
	Issuer Role = "issuer"
	// Coordinator: the PDD coordinator, its buckets and active index.
	Coordinator Role = "coordinator"
	// Aggregator: the aggregator's PDD side (aggregate-vectors), which
	// requests recoveries from the coordinator.
	Aggregator Role = "aggregator"
	// Operator: the pipeline operator (`crowdlog run` replaying a log,
	// `crowdlog coordinator advance`): reads the relay consumers' backlog,
	// advances the PDD clock.
	Operator Role = "operator"
	// Admin: the deployment's administrator (`crowdlog streams`): creates
	// and updates every JetStream stream and key-value bucket of
	// AdminStreams before the roles start. No runtime role holds a
	// stream-admin right: an update can add Sources or RePublish to a
	// stream and so copy any other stream of the account into it.
	Admin Role = "admin"
	// Prio3Leader and Prio3Helper: the two aggregators of PDD's Prio3
	// mode, each its own operator (aggregate-prio3 --role leader|helper).
	// The leader asks the helper over NATS (protocol.Prio3HelperSubject);
	// everything else they do is on Kafka.
	Prio3Leader Role = "prio3-leader"
	Prio3Helper Role = "prio3-helper"
)

// Roles lists every role of Table in a fixed order (the order of the
// generated configuration).
var Roles = []Role{Client, RelayA, RelayB, Randomness, Issuer, Coordinator, Aggregator, Operator, Admin, Prio3Leader, Prio3Helper}

// RelayRole returns the role of relay name ("a" → RelayA).
func RelayRole(name string) Role { return Role("relay-" + name) }

// InboxPrefix is the inbox prefix a role's connection uses for replies
// (nats.CustomInboxPrefix): "_INBOX." + role. A role may subscribe only
// below its own prefix. A client connection puts one random token of its
// own after it (natsconn.ClientInboxPrefix).
func InboxPrefix(r Role) string { return "_INBOX." + string(r) }

// Permissions is one row of the table: the subjects (NATS wildcards * and
// >) a role may publish to and subscribe to, and whether it may answer
// requests it received (allow_responses: one reply per request).
type Permissions struct {
	Publish   []string
	Subscribe []string
	Responses bool
}

// jsInfo is the JetStream account-info request (readiness checks).
const jsInfo = "$JS.API.INFO"

// streamAdmin are the JetStream API subjects that look up, create and
// update stream (not delete or purge it): the Admin role's only.
func streamAdmin(stream string) []string {
	return []string{streamInfo(stream), "$JS.API.STREAM.CREATE." + stream, "$JS.API.STREAM.UPDATE." + stream}
}

// streamInfo is the JetStream API subject that looks stream up (its
// configuration and state): what a runtime role needs to bind an existing
// stream or key-value bucket.
func streamInfo(stream string) string { return "$JS.API.STREAM.INFO." + stream }

// AdminStreams are the names of the JetStream streams of a deployment,
// created by the Admin role (`crowdlog streams`) before the roles start,
// each in its owner's account (Streams): the relay stream (one per
// relay's account), the key-value buckets' streams (KV_<bucket>) of the
// issuers' counters, the spent tokens and the PDD coordinator, and the
// coordinator's active index.
var AdminStreams = []string{
	protocol.RelayStream,
	"KV_" + protocol.IssuerCountersBucket, "KV_" + protocol.IssuerRandomnessCountersBucket,
	"KV_" + protocol.SpentTokensBucket,
	"KV_" + protocol.PDDBucket, "KV_" + protocol.PDDRoundsBucket, protocol.PDDActiveStream,
}

// streamUse are the JetStream API subjects that read stream's messages
// (direct and API gets) and run any consumer on it (create, info, next,
// ack, flow control, delete): what a key-value bucket's owner and an
// ordered consumer need.
func streamUse(stream string) []string {
	return []string{
		"$JS.API.STREAM.MSG.GET." + stream, "$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.CONSUMER.CREATE." + stream, "$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".>", "$JS.API.CONSUMER.DELETE." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>", "$JS.ACK." + stream + ".>", "$JS.FC." + stream + ".>",
	}
}

// kv is everything the owner of key-value bucket does at run time: look
// its stream KV_<bucket> up, read it (direct gets: crowdlog's buckets
// are created with allow_direct, so nats.go never asks STREAM.MSG.GET), and its
// subjects $KV.<bucket>.> (put, create, update, delete, purge of keys).
// No consumer: gets and puts need none, and a consumer's creator chooses
// its deliver subject, which nats-server does not check against the
// creator's publish permissions. Creating or changing the bucket is the
// Admin role's.
func kv(bucket string) []string {
	s := "KV_" + bucket
	return []string{"$KV." + bucket + ".>", streamInfo(s), "$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".>"}
}

// kvWatch is kv plus streamUse: the coordinator lists the keys of its
// rounds bucket (ordered consumers). Its account imports nothing, so a deliver
// subject it names stays in its own account.
func kvWatch(bucket string) []string {
	s := "KV_" + bucket
	use := slices.DeleteFunc(streamUse(s), func(subj string) bool { return subj == "$JS.API.STREAM.MSG.GET."+s })
	return slices.Concat([]string{"$KV." + bucket + ".>", streamInfo(s)}, use)
}

// relayConsumer is what relay name does on its inbox stream (in its own
// account): look its durable consumer up, fetch and acknowledge. The
// admin step creates the consumer (AdminAPI); a relay may not create or
// change one.
func relayConsumer(name string) []string {
	s, c := protocol.RelayStream, protocol.RelayConsumerName(name)
	return []string{
		"$JS.API.CONSUMER.INFO." + s + "." + c,
		"$JS.API.CONSUMER.MSG.NEXT." + s + "." + c,
		"$JS.ACK." + s + "." + c + ".>",
	}
}

// clientRequests are the request subjects of the client: randomness,
// issuer, relay keys, PDD coordinator (not advance or recovery).
var clientRequests = []string{
	protocol.RandomnessSubject, protocol.RandomnessPublicKeySubject,
	protocol.IssuerSubject, protocol.IssuerPublicKeySubject,
	protocol.IssuerRandomnessSubject, protocol.IssuerRandomnessPublicKeySubject,
	protocol.IssuerPrio3HelperSubject, protocol.IssuerPrio3HelperPublicKeySubject,
	protocol.IssuerPrio3LeaderSubject, protocol.IssuerPrio3LeaderPublicKeySubject,
	protocol.Prio3SettingsSubject,
	protocol.RelayKeysSubjectPrefix + "*",
	protocol.PDDRegisterSubject, protocol.PDDPingSubject, protocol.PDDDepositSubject, protocol.PDDBundlesSubject,
	protocol.PipelineSubject,
}

// Table returns the permission row of role r; ok is false for a role not
// in Roles. Each row lists everything the role's code does on NATS:
//
//   - client: publish to relay a's inbox only (JetStream, acknowledged to
//     its inbox) and request randomness, issuer, relay keys and the PDD
//     coordinator's client subjects;
//   - relay-a: consume its own inbox (look up, fetch from and acknowledge
//     its durable consumer, which the admin step created), publish to
//     relay b's inbox, answer crowdlog.relaykeys.a; relay-b: the same
//     without any publish (it forwards to Kafka); both may look their
//     relay stream up;
//   - randomness: answer crowdlog.randomness[.pubkey]; own the spent-token
//     bucket; as the issuer of randomness tokens at the randomness
//     operator (key custody split by verifier), answer
//     crowdlog.issuer.randomness[.pubkey] and own its counters bucket;
//   - issuer: answer crowdlog.issuer[.pubkey]; own the counters bucket
//     (single host: every kind; split: the aggregator's operator's issuer
//     of report tokens and ARC credentials);
//   - coordinator: answer every crowdlog.pdd.* subject; own its two
//     buckets and the active index (the only runtime role that creates
//     consumers: ordered ones on its own streams, in an account that
//     imports nothing);
//   - aggregator: request crowdlog.pdd.recovery (aggregate-vectors);
//     answer crowdlog.pipeline (aggregate --nats: the served pipelines
//     and report counts);
//   - operator: look each relay's stream and consumer up (OperatorAPI,
//     under JSAPIPrefix of the relay) and request crowdlog.pdd.advance
//     (public keys and relay keys are fetched with the client
//     credential, so the operator's account imports neither);
//   - admin: create, update and look up the streams of every account
//     and create the relays' durable consumers (AdminAPI, under
//     JSAPIPrefix of each JetStream role), nothing else;
//   - prio3-leader: request crowdlog.prio3.helper (replies to its own
//     inbox) and answer crowdlog.prio3.settings (its signed campaign
//     settings, to clients); its operator's issuer of leader tokens
//     answers crowdlog.issuer.prio3-leader(.pubkey) and counts issuances
//     in its own bucket, nothing else;
//   - prio3-helper: answer crowdlog.prio3.helper; it publishes nothing of
//     its own, and its publish list names only its own inbox because
//     nats-server reads an empty allow list as no restriction at all.
//
// Every row's publish and subscribe lists are non-empty (Text refuses an
// empty one for that reason).
//
// No runtime role may create, update, delete or purge a stream, and none
// but the coordinator may create a consumer: only Admin, which runs before
// the roles start. The JetStream subjects of each row are those of the
// role's own account (AccountOf); the admin's and the operator's reach
// other accounts through imports.
//
// No role but the issuer touches $KV.crowdlog-issuer-counters.> or its
// stream, no role but the randomness service the spent-token bucket and
// the randomness issuer's counters.
func Table(r Role) (p Permissions, ok bool) {
	inbox := InboxPrefix(r) + ".>"
	relayStream := []string{streamInfo(protocol.RelayStream)}
	switch r {
	case Client:
		// each client connection's inbox is InboxPrefix(Client) + "." +
		// a random token (natsconn.ClientInboxPrefix): one token level,
		// so "_INBOX.client.>" itself is refused
		return Permissions{Publish: slices.Concat([]string{protocol.RelaySubject("a")}, clientRequests), Subscribe: []string{InboxPrefix(r) + ".*.>"}}, true
	case RelayA, RelayB:
		name := string(r[len("relay-"):])
		pub := slices.Concat(relayStream, relayConsumer(name), []string{jsInfo})
		if r == RelayA {
			pub = append(pub, protocol.RelaySubject("b"))
		}
		return Permissions{Publish: pub, Subscribe: []string{protocol.RelayKeysSubject(name), inbox}, Responses: true}, true
	case Randomness:
		return Permissions{Publish: slices.Concat(kv(protocol.SpentTokensBucket), kv(protocol.IssuerRandomnessCountersBucket), []string{jsInfo}),
			Subscribe: []string{protocol.RandomnessSubject, protocol.RandomnessPublicKeySubject,
				protocol.IssuerRandomnessSubject, protocol.IssuerRandomnessPublicKeySubject, inbox}, Responses: true}, true
	case Issuer:
		return Permissions{Publish: slices.Concat(kv(protocol.IssuerCountersBucket), []string{jsInfo}),
			Subscribe: []string{protocol.IssuerSubject, protocol.IssuerPublicKeySubject, inbox}, Responses: true}, true
	case Coordinator:
		pub := slices.Concat(kv(protocol.PDDBucket), kvWatch(protocol.PDDRoundsBucket),
			[]string{streamInfo(protocol.PDDActiveStream)}, streamUse(protocol.PDDActiveStream),
			[]string{protocol.PDDActiveSubjectPrefix + ">", jsInfo})
		sub := []string{protocol.PDDRegisterSubject, protocol.PDDPingSubject, protocol.PDDDepositSubject,
			protocol.PDDBundlesSubject, protocol.PDDAdvanceSubject, protocol.PDDRecoverySubject, inbox}
		return Permissions{Publish: pub, Subscribe: sub, Responses: true}, true
	case Aggregator:
		return Permissions{Publish: []string{protocol.PDDRecoverySubject}, Subscribe: []string{protocol.PipelineSubject, inbox}, Responses: true}, true
	case Operator:
		var pub []string
		for _, owner := range JetStreamRoles {
			for _, subj := range OperatorAPI(owner) {
				pub = append(pub, imported(owner, subj))
			}
		}
		pub = append(pub, protocol.PDDAdvanceSubject)
		return Permissions{Publish: pub, Subscribe: []string{inbox}}, true
	case Admin:
		var pub []string
		for _, owner := range JetStreamRoles {
			for _, subj := range AdminAPI(owner) {
				pub = append(pub, imported(owner, subj))
			}
		}
		return Permissions{Publish: pub, Subscribe: []string{inbox}}, true
	case Prio3Leader:
		// requests to the helper; answers the clients' settings requests;
		// its operator's issuer of leader tokens (counters in its own
		// account's bucket)
		return Permissions{Publish: slices.Concat([]string{protocol.Prio3HelperSubject}, kv(protocol.IssuerPrio3LeaderCountersBucket), []string{jsInfo}),
			Subscribe: []string{protocol.Prio3SettingsSubject, protocol.IssuerPrio3LeaderSubject, protocol.IssuerPrio3LeaderPublicKeySubject, inbox},
			Responses: true}, true
	case Prio3Helper:
		// the helper and its operator's issuer of helper tokens (counters
		// in its own account's bucket)
		return Permissions{Publish: slices.Concat(kv(protocol.IssuerPrio3HelperCountersBucket), []string{jsInfo, inbox}),
			Subscribe: []string{protocol.Prio3HelperSubject, protocol.IssuerPrio3HelperSubject, protocol.IssuerPrio3HelperPublicKeySubject, inbox},
			Responses: true}, true
	}
	return Permissions{}, false
}

// ParseRole returns the role named s, or an error listing the roles.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("natsauth: unknown role %q (one of %v)", s, Roles)
}

// Markdown renders the table as a Markdown table (role, may publish, may
// subscribe, answers requests), the form docs/operations.md quotes.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| role | may publish | may subscribe | answers requests |\n| --- | --- | --- | --- |\n")
	code := func(subjects []string) string {
		q := make([]string, len(subjects))
		for i, s := range subjects {
			q[i] = "`" + s + "`"
		}
		return strings.Join(q, " ")
	}
	for _, r := range Roles {
		p, _ := Table(r)
		answers := "no"
		if p.Responses {
			answers = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r, code(p.Publish), code(p.Subscribe), answers)
	}
	return b.String()
}
