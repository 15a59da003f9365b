package protocol

// The names two roles must agree on: Kafka topics and headers, NATS
// subjects and queue groups. Each is defined here once; roles and clients
// refer to these constants, never to string literals.

// Kafka topics.
const (
	// ReportsTopic carries sealed reports (the aggregator's onion layer),
	// keyed by a tag bucket, from relay b to the aggregator, and the
	// EpochClose control messages.
	ReportsTopic = "reports"
	// DecryptedTopic carries the aggregator's Decrypted messages to the
	// release stage, on the partition number of their reports partition.
	DecryptedTopic = "decrypted"
	// VectorsTopic carries PDD blinded vectors, recovery answers and the
	// coordinator's rosters and ticks, keyed by group (aggregator/vectors).
	VectorsTopic = "vectors"
	// GroupSumsTopic carries each PDD group's outcome to the release stage.
	GroupSumsTopic = "group-sums"
	// Prio3UploadsTopic carries Prio3-mode client uploads from relay b to
	// the leader aggregator: the value is the protocol/prio3 upload exactly
	// as VDAF.Shard returned it (already HPKE-sealed to the leader, the
	// helper's input share sealed to the helper inside), the key the
	// campaign name (onion.HopKafkaPrio3 layer's Key). Values reach about
	// 655 KB at L = 10,000, b = 4; the topic's max.message.bytes is 2 MiB.
	Prio3UploadsTopic = "prio3-uploads"
	// Prio3SharesTopic carries both aggregate shares of a collected Prio3
	// batch from the leader to the release stage (the collector): the value
	// is an encoded protocol/prio3 AggShare (role 0 leader, 1 helper),
	// sealed to the collector; the key is campaign + "/" + day.String().
	Prio3SharesTopic = "prio3-shares"
)

// Kafka headers.
const (
	// ControlHeader marks control messages (EpochOpen, EpochClose and
	// SignedControl on ReportsTopic; rosters and ticks on VectorsTopic).
	// Relays never set headers, so clients cannot forge control messages
	// through the relays; anyone who may write to the topic can, so
	// aggregators verify the epoch control of ReportsTopic under the
	// pipeline operator's key (Control.Verify).
	ControlHeader = "crowdlog-control"
	// PartitionHeader carries the partition number a message must be
	// written to (the source partition of an aggregator output, the
	// partition of a coordinator tick); the writer's balancer reads it.
	PartitionHeader = "crowdlog-partition"
)

// NATS subjects of the randomness service (request/reply).
const (
	// RandomnessSubject: OPRF evaluation (oprf.RandomnessRequest/Response).
	RandomnessSubject = "crowdlog.randomness"
	// RandomnessPublicKeySubject: epoch public keys
	// (oprf.PublicKeyRequest/Response).
	RandomnessPublicKeySubject = "crowdlog.randomness.pubkey"
)

// Privacy Pass (RFC 9576) names: the issuer role (NATS request/reply) and
// the JetStream key-value buckets behind rate limits and double-spend
// checks (docs/threat-model.md, probe and Sybil rows).
const (
	// IssuerSubject: token and credential issuance
	// (protocol/token.IssueRequest/IssueResponse), queue group "issuer".
	IssuerSubject = "crowdlog.issuer"
	// IssuerPublicKeySubject: the issuer's public keys per epoch and kind.
	IssuerPublicKeySubject = "crowdlog.issuer.pubkey"
	// IssuerCountersBucket: JetStream KV of the issuer's per-identity,
	// per-epoch, per-kind counts (key: hex SHA-256 of identity ‖ u8
	// len(epoch) ‖ epoch ‖ kind, issuer.CounterKey) and of its replay
	// markers (replay-<hex>, with a per-key TTL); durable across restarts
	// and shared by issuer replicas.
	IssuerCountersBucket = "crowdlog-issuer-counters"
	// IssuerRandomnessSubject and IssuerRandomnessPublicKeySubject: the
	// issuer of randomness tokens when it runs at the randomness operator,
	// apart from the issuer of report tokens and ARC credentials at the
	// aggregator's operator (key custody, docs/threat-model.md): issuance
	// requests of KindRandomness and the epoch's randomness-token public
	// key (a token.KeysResponse with only Randomness set).
	IssuerRandomnessSubject          = "crowdlog.issuer.randomness"
	IssuerRandomnessPublicKeySubject = "crowdlog.issuer.randomness.pubkey"
	// IssuerRandomnessCountersBucket: IssuerCountersBucket of the
	// randomness operator's issuer, so that neither operator's issuer can
	// reset the other's budgets.
	IssuerRandomnessCountersBucket = "crowdlog-issuer-randomness-counters"
	// IssuerPrio3HelperSubject, IssuerPrio3HelperPublicKeySubject and
	// IssuerPrio3HelperCountersBucket: the issuer of Prio3 helper tokens
	// (token.KindPrio3Helper, one per identity per campaign-day), run by
	// the Prio3 helper's operator, whose account exports the two subjects
	// to the clients and keeps the bucket: the leader's operator can
	// neither mint helper tokens nor reset their counts.
	IssuerPrio3HelperSubject          = "crowdlog.issuer.prio3-helper"
	IssuerPrio3HelperPublicKeySubject = "crowdlog.issuer.prio3-helper.pubkey"
	IssuerPrio3HelperCountersBucket   = "crowdlog-issuer-prio3-helper-counters"
	// IssuerPrio3LeaderSubject, IssuerPrio3LeaderPublicKeySubject and
	// IssuerPrio3LeaderCountersBucket: the issuer of Prio3 leader tokens
	// (token.KindPrio3Leader), run by the Prio3 leader's operator, whose
	// account exports the two subjects and keeps the bucket: the helper's
	// operator can neither mint leader tokens nor reset their counts.
	IssuerPrio3LeaderSubject          = "crowdlog.issuer.prio3-leader"
	IssuerPrio3LeaderPublicKeySubject = "crowdlog.issuer.prio3-leader.pubkey"
	IssuerPrio3LeaderCountersBucket   = "crowdlog-issuer-prio3-leader-counters"
	// SpentTokensBucket: JetStream KV of spent randomness tokens (key: hex
	// of the token's spend id); a create that finds the key is a double
	// spend, refused by every randomness replica alike.
	SpentTokensBucket = "crowdlog-spent-tokens"
)

// Prio3HelperSubject is the NATS request/reply subject on which the Prio3
// leader asks the helper aggregator: the request body is an encoded
// protocol/prio3 AggregateReq or CollectReq (its first bytes tell which),
// the reply the AggregateResp or AggShare. The helper answers through
// natsconn.Respond, which checks the reply subject.
const Prio3HelperSubject = "crowdlog.prio3.helper"

// Prio3SettingsSubject is the NATS request/reply subject on which the
// Prio3 leader announces its campaign's settings to clients: the request
// body is the campaign name, the reply an encoded protocol/prio3
// SignedSettings (signed with the leader operator's signing key), which a
// client verifies and compares with its own before it uploads.
const Prio3SettingsSubject = "crowdlog.prio3.settings"

// RelaySubjectPrefix is the subject prefix of relay inboxes; RelaySubject
// appends the relay name. A HopRelay layer must name a subject under this
// prefix.
const RelaySubjectPrefix = "crowdlog.relay."

// RelaySubject returns the NATS subject of relay name's inbox:
// "crowdlog.relay." + name.
func RelaySubject(name string) string { return RelaySubjectPrefix + name }

// RelayKeysSubjectPrefix is the subject prefix of relay key announcements;
// RelayKeysSubject appends the relay name. It lies outside
// RelaySubjectPrefix on purpose: the relay stream captures
// "crowdlog.relay.>", and a request published there would be stored as an
// inbox message and acknowledged by JetStream instead of answered by the
// relay.
const RelayKeysSubjectPrefix = "crowdlog.relaykeys."

// RelayKeysSubject returns the NATS request/reply subject on which relay
// name announces the HPKE key ids it holds (onion.RelayKeysRequest/Response):
// "crowdlog.relaykeys." + name.
func RelayKeysSubject(name string) string { return RelayKeysSubjectPrefix + name }

// PipelineSubject is the NATS request/reply subject on which every
// threshold aggregator process started with a NATS connection announces
// the pipeline definitions it serves and its report counts per (pipeline,
// app, epoch) (pipelinespec.Announcement). No queue group: each process
// answers, and a client sums the answers it hears.
const PipelineSubject = "crowdlog.pipeline"

// NATS subjects of the PDD coordinator (request/reply; several coordinator
// processes form the queue group CoordinatorQueueGroup). Messages are in
// package blind (messages.go).
const (
	PDDRegisterSubject = "crowdlog.pdd.register"
	PDDPingSubject     = "crowdlog.pdd.ping"
	PDDDepositSubject  = "crowdlog.pdd.deposit" // chunked (blind.SplitDeposit)
	PDDBundlesSubject  = "crowdlog.pdd.bundles" // a survivor's bundles, page by page
	PDDAdvanceSubject  = "crowdlog.pdd.advance"
	PDDRecoverySubject = "crowdlog.pdd.recovery"

	CoordinatorQueueGroup = "crowdlog-coordinator"
)

// JetStream names behind the subjects above, here so that the NATS
// permission table (infra/natsauth) can name every stream a role touches.
const (
	// RelayStream is the JetStream work-queue stream holding every relay
	// inbox (subjects RelaySubjectPrefix + ">"; relays.StreamConfig).
	RelayStream = "CROWDLOG_RELAY"
	// PDDBucket is the coordinator's key-value bucket of clients and the
	// clock.
	PDDBucket = "crowdlog_pdd"
	// PDDRoundsBucket is the coordinator's key-value bucket of groups,
	// bundles and recoveries.
	PDDRoundsBucket = "crowdlog_pdd_rounds"
	// PDDActiveStream is the coordinator's stream of clients active per
	// campaign and day, on subjects PDDActiveSubjectPrefix + ">".
	PDDActiveStream        = "crowdlog_pdd_active"
	PDDActiveSubjectPrefix = "crowdlog.pdd.active."
)

// RelayConsumerName returns the durable JetStream consumer name shared by
// all processes of relay name: "relay-" + name.
func RelayConsumerName(name string) string { return "relay-" + name }
