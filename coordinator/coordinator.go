// Package coordinator is the Private Data Donor server's control plane
// (Primault et al., WWW 2019, §3.4 "Enhanced Aggregation Protocol"): client
// registration with a long-term public key, the campaign (monitored
// keywords, group size, delay δ, recovery window), the nightly formation of
// groups from the clients active on the previous day (with PDD's activity
// heuristic, eq. 5), and on each client's daily ping its instructions: the
// rounds it owes, its groups' public keys, and recovery tasks.
//
// State is durable in two JetStream key-value buckets (file storage; 3
// replicas on a NATS cluster of 3 or more, natsconn.Replicas), so a
// restarted coordinator — or another process of the queue group — carries
// on: "crowdlog_pdd" holds clients, the clock and the campaign start;
// "crowdlog_pdd_rounds" (with a retention age) holds groups, membership,
// deposited recovery bundles and recovery requests; the stream
// "crowdlog_pdd_active" indexes the clients active per campaign and day
// (index.go), so a day's formation reads only that day's clients. Group
// formation is deterministic (seeded by campaign and round), so a formation interrupted
// by a crash and redone produces the same groups. Rosters and day ticks go
// to Kafka topic "vectors", where the aggregator (aggregator/vectors) reads
// them in order with the members' submissions.
//
// A member's deposit is about 44·n² bytes for a group of n, so it arrives
// in chunks (blind.DepositRequest, blind.SplitDeposit) and a survivor
// fetches the bundles addressed to it in pages (blind.BundlesRequest), each
// message under blind.MaxMessageBytes (512 KiB) of JSON: group size is
// bounded by the members' CPU (dealing is O(n²)), not by NATS's 1 MiB
// default payload.
//
// The coordinator never sees counts: vectors travel through the relays to
// the aggregator. It learns who is active on which day and the group
// memberships, as PDD's server does.
package coordinator

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// Campaign is what analysts configure (PDD §5.3 "campaigns").
type Campaign struct {
	Name         string         // [A-Za-z0-9._-]{1,64}
	List         *keywords.List // monitored keywords (default keywords.Default())
	ListName     string         // shown to clients (e.g. keywords.DefaultName)
	GroupSize    int            // gs; default 100 (PDD §4.2)
	Delay        int            // δ in days; default 2 (PDD §4.3)
	RecoveryDays int            // days after the delay for recovery answers; default 1
	Heuristic    bool           // PDD eq. 5 activity heuristic
	// End is the campaign's last round (a day number, keywords.Day); no
	// groups are formed for later rounds. 0 means open-ended.
	End int32
}

// BucketConfigs are the configurations of the coordinator's two
// key-value buckets: protocol.PDDBucket (clients, clock; kept) and
// protocol.PDDRoundsBucket (groups, bundles, recoveries; entries kept
// retention, <= 0: 30 days; values up to 4 MiB), file storage, history 1,
// replicas copies. The admin step (`crowdlog streams`, streams.Ensure)
// applies them; the coordinator only looks them up.
func BucketConfigs(retention time.Duration, replicas int) [2]jetstream.KeyValueConfig {
	if retention <= 0 {
		retention = 30 * 24 * time.Hour
	}
	replicas = max(replicas, 1)
	return [2]jetstream.KeyValueConfig{
		{Bucket: protocol.PDDBucket, Description: "crowdlog PDD coordinator: clients, clock",
			Storage: jetstream.FileStorage, History: 1, Replicas: replicas},
		{Bucket: protocol.PDDRoundsBucket, Description: "crowdlog PDD coordinator: groups, bundles, recoveries",
			Storage: jetstream.FileStorage, History: 1, TTL: retention, MaxValueSize: 4 << 20, Replicas: replicas},
	}
}

// Coordinator serves the coordinator subjects. Set the fields, then Start.
type Coordinator struct {
	NC       *nats.Conn
	Brokers  []string // Kafka, for rosters and ticks on topic "vectors"
	Campaign Campaign
	// Retention bounds how long round state (groups, bundles) is kept;
	// default 30 days.
	Retention time.Duration
	Logger    *slog.Logger

	js         jetstream.JetStream
	kv, rounds jetstream.KeyValue
	w, tickW   *kafka.Writer
	partitions int
	hash       [32]byte
	mu         sync.Mutex // serializes Advance
	subs       []*nats.Subscription

	// AggregatorKey is the aggregator's Ed25519 credential: recovery
	// requests over NATS must be signed with it (refused when nil).
	AggregatorKey ed25519.PublicKey
	// OperatorKey is the operator's Ed25519 credential: clock advances
	// over NATS must be signed with it (refused when nil; Advance called in
	// process needs none).
	OperatorKey ed25519.PublicKey
	// SignKey is the coordinator's own Ed25519 key (RFC 8032): every
	// roster, tick and commit it writes to topic "vectors" is a
	// protocol.VectorsControl signed with it, bound to the topic, the
	// partition, the campaign and the issue time, so that aggregate-vectors
	// (--coordinator-pub) applies only the coordinator's. Nil: written
	// unsigned (logged), and such an aggregator refuses them.
	SignKey ed25519.PrivateKey

	// Pings counts answered pings, Errors requests answered with an error.
	Pings, Errors atomic.Int64

	refusedMu sync.Mutex
	refused   map[string]int64
}

// Reasons a request is refused (Refused counts them).
const (
	RefusedMalformed    = "malformed"     // does not parse
	RefusedSignature    = "bad_signature" // not signed by the key it must come from
	RefusedReplay       = "replay"        // a sequence number not above the client's last
	RefusedUnknown      = "unknown"       // unknown client or group
	RefusedNotMember    = "not_member"    // a deposit for a member index that is not the caller
	RefusedConflict     = "conflict"      // a second, different recovery request for a group
	RefusedUnconfigured = "no_credential" // recovery or advance with no credential configured
	RefusedReplySubject = "reply_subject" // the reply subject is not a requester inbox (natsconn.Accept): refused before handling
)

// Refused returns how many requests were refused for each reason.
func (c *Coordinator) Refused() map[string]int64 {
	c.refusedMu.Lock()
	defer c.refusedMu.Unlock()
	out := map[string]int64{}
	for k, v := range c.refused {
		out[k] = v
	}
	return out
}

func (c *Coordinator) refuse(reason, format string, a ...any) string {
	c.refusedMu.Lock()
	if c.refused == nil {
		c.refused = map[string]int64{}
	}
	c.refused[reason]++
	c.refusedMu.Unlock()
	msg := fmt.Sprintf("coordinator: refused (%s): ", reason) + fmt.Sprintf(format, a...)
	c.Logger.Warn(msg)
	return msg
}

type clientRec struct {
	Public  []byte  `json:"public"`
	Sign    []byte  `json:"sign"`     // Ed25519 signing key
	LastSeq uint64  `json:"last_seq"` // highest sequence number accepted
	Days    []int32 `json:"days"`     // active days, ascending
}

type groupRec struct {
	Members   []string `json:"members"` // client ids
	Pubs      [][]byte `json:"pubs"`
	T         int      `json:"t"`
	Deadline  int32    `json:"deadline"`
	RecoverBy int32    `json:"recover_by"`
}

// Start creates the buckets (idempotent), connects to Kafka and subscribes
// the handlers in queue group QueueGroup. Errors say which part failed.
func (c *Coordinator) Start(ctx context.Context) error {
	cp := &c.Campaign
	if !blind.ValidCampaign(cp.Name) {
		return fmt.Errorf("coordinator: campaign name %q: use 1-64 of [A-Za-z0-9._-]", cp.Name)
	}
	if cp.List == nil {
		cp.List, cp.ListName = keywords.Default(), keywords.DefaultName
	}
	cp.GroupSize = max(cp.GroupSize, 0)
	if cp.GroupSize == 0 {
		cp.GroupSize = 100
	}
	if cp.GroupSize < blind.MinGroup {
		return fmt.Errorf("coordinator: group size %d < %d", cp.GroupSize, blind.MinGroup)
	}
	if cp.Delay < 0 || cp.RecoveryDays < 0 {
		return errors.New("coordinator: delay and recovery days must be ≥ 0")
	}
	if cp.RecoveryDays == 0 {
		cp.RecoveryDays = 1
	}
	if c.Retention <= 0 {
		c.Retention = 30 * 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.hash = cp.List.Hash()
	js, err := jetstream.New(c.NC)
	if err != nil {
		return err
	}
	c.js = js
	// the buckets and the active index exist (the admin step, `crowdlog
	// streams`, created them); the coordinator looks them up and never
	// changes them
	replicas := natsconn.Replicas(c.NC)
	buckets := BucketConfigs(c.Retention, replicas)
	if c.kv, err = natsconn.OpenKeyValue(ctx, js, buckets[0]); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if c.rounds, err = natsconn.OpenKeyValue(ctx, js, buckets[1]); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if _, err := natsconn.OpenStream(ctx, js, ActiveIndexConfig(c.Retention, replicas)); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	conn, err := infrakafka.Dialer(ctx).DialContext(ctx, "tcp", c.Brokers[0])
	if err != nil {
		return fmt.Errorf("coordinator: dial kafka %s: %w", c.Brokers[0], err)
	}
	parts, err := conn.ReadPartitions(protocol.VectorsTopic)
	conn.Close()
	if err != nil || len(parts) == 0 {
		return fmt.Errorf("coordinator: topic vectors (create it with `crowdlog topics`, as for the other roles): %v", err)
	}
	c.partitions = len(parts)
	// every control record names its partition (it is bound into the
	// signature): a group's rosters and commitments go where the relays'
	// kafka.Hash balancer puts its members' vectors (partitionOf)
	c.w = &kafka.Writer{Addr: kafka.TCP(c.Brokers...), Topic: protocol.VectorsTopic, Balancer: kafka.BalancerFunc(headerPartition),
		RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond, Transport: infrakafka.Transport(ctx)}
	if c.SignKey == nil {
		c.Logger.Warn("coordinator: rosters, ticks and commitments are written unsigned (no --sign-key): aggregate-vectors started with --coordinator-pub refuses them")
	}
	c.tickW = &kafka.Writer{Addr: kafka.TCP(c.Brokers...), Topic: protocol.VectorsTopic, Balancer: kafka.BalancerFunc(headerPartition),
		RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond, Transport: infrakafka.Transport(ctx)}
	handlers := map[string]func(context.Context, []byte) any{
		protocol.PDDRegisterSubject: c.handleRegister, protocol.PDDPingSubject: c.handlePing, protocol.PDDDepositSubject: c.handleDeposit,
		protocol.PDDAdvanceSubject: c.handleAdvance, protocol.PDDRecoverySubject: c.handleRecovery,
		protocol.PDDBundlesSubject: c.handleBundles,
	}
	// nats.go runs one subscription's callbacks one at a time; requests are
	// independent, so each is served on its own goroutine (at most 64 at once)
	sem := make(chan struct{}, 64)
	for subj, h := range handlers {
		sub, err := c.NC.QueueSubscribe(subj, protocol.CoordinatorQueueGroup, func(m *nats.Msg) {
			// before any registration, deposit or clock change: a request
			// whose answer could not go to a requester inbox is refused
			if natsconn.Accept(m) != nil {
				c.refuse(RefusedReplySubject, "%s: reply subject is not a requester inbox", subj)
				return
			}
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				rep := h(hctx, m.Data)
				b, _ := json.Marshal(rep)
				if strings.Contains(string(b), `"error":`) {
					c.Errors.Add(1)
				} else if subj == protocol.PDDPingSubject {
					c.Pings.Add(1)
				}
				_ = natsconn.Respond(m, b)
			}()
		})
		if err != nil {
			return fmt.Errorf("coordinator: subscribe %s: %w", subj, err)
		}
		c.subs = append(c.subs, sub)
	}
	return c.NC.Flush()
}

// Close unsubscribes and closes the Kafka writers.
func (c *Coordinator) Close() {
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
	if c.w != nil {
		infrakafka.CloseWriter(c.w)
		infrakafka.CloseWriter(c.tickW)
	}
}

// partitionOf is the partition of "vectors" the relays' writer (a
// kafka.Hash balancer over partitions 0…n−1) puts a record with key in.
func (c *Coordinator) partitionOf(key []byte) int {
	parts := make([]int, c.partitions)
	for i := range parts {
		parts[i] = i
	}
	return (&kafka.Hash{}).Balance(kafka.Message{Key: key}, parts...)
}

// control returns the record of a control message body (kind "roster",
// "tick" or "commit", the value of protocol.ControlHeader) for partition
// p: a protocol.VectorsControl signed with SignKey for ("vectors", p, the
// campaign), issued now and valid protocol.ControlValidity, or the bare
// body without SignKey. The Kafka timestamp is the issue time.
func (c *Coordinator) control(kind string, key, body []byte, p int) (kafka.Message, error) {
	now := time.Now()
	v := body
	if c.SignKey != nil {
		var err error
		if v, err = protocol.SignVectorsControl(c.SignKey, body, protocol.VectorsTarget{Topic: protocol.VectorsTopic, Partition: p,
			Campaign: c.Campaign.Name}, now, protocol.ControlValidity); err != nil {
			return kafka.Message{}, fmt.Errorf("sign %s: %w", kind, err)
		}
	}
	return kafka.Message{Key: key, Value: v, Time: now, Headers: []kafka.Header{{Key: protocol.ControlHeader, Value: []byte(kind)},
		{Key: protocol.PartitionHeader, Value: []byte(strconv.Itoa(p))}}}, nil
}

func headerPartition(m kafka.Message, partitions ...int) int {
	for _, h := range m.Headers {
		if h.Key == protocol.PartitionHeader {
			p, _ := strconv.Atoi(string(h.Value))
			return partitions[p%len(partitions)]
		}
	}
	return partitions[0]
}

func (c *Coordinator) handleRegister(ctx context.Context, b []byte) any {
	r, err := blind.ParseRegister(b)
	if err != nil {
		reason := RefusedMalformed
		if errors.Is(err, blind.ErrBadSignature) {
			reason = RefusedSignature
		}
		return blind.RegisterReply{Error: c.refuse(reason, "register: %v", err)}
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	v, _ := json.Marshal(clientRec{Public: r.PublicKey, Sign: r.SignKey})
	if _, err := c.kv.Create(ctx, "client."+id, v); err != nil {
		return blind.RegisterReply{Error: "coordinator: store client: " + err.Error()}
	}
	cp := c.Campaign
	return blind.RegisterReply{ClientID: id, Campaign: cp.Name, Keywords: cp.ListName, L: cp.List.Len(), ListHash: c.hash[:]}
}

// Day returns the coordinator's current day (the clock), or false before
// the first Advance.
func (c *Coordinator) Day(ctx context.Context) (int32, bool, error) {
	e, err := c.kv.Get(ctx, "clock")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	d, err := strconv.Atoi(string(e.Value()))
	return int32(d), err == nil, err
}

func (c *Coordinator) start(ctx context.Context) (int32, error) {
	e, err := c.kv.Get(ctx, "start."+c.Campaign.Name)
	if err != nil {
		return 0, err
	}
	d, err := strconv.Atoi(string(e.Value()))
	return int32(d), err
}

func (c *Coordinator) handleAdvance(ctx context.Context, b []byte) any {
	a, sig, err := blind.ParseAdvance(b)
	if err != nil {
		return blind.AdvanceReply{Error: c.refuse(RefusedMalformed, "advance: %v", err)}
	}
	if c.OperatorKey == nil {
		return blind.AdvanceReply{Error: c.refuse(RefusedUnconfigured, "advance: this coordinator has no operator credential (start it with --operator-key)")}
	}
	if err := sig.Verify(c.OperatorKey, blind.PurposeAdvance); err != nil {
		return blind.AdvanceReply{Error: c.refuse(RefusedSignature, "advance to day %d: %v", a.Day, err)}
	}
	rep, err := c.Advance(ctx, a.Day)
	if err != nil {
		return blind.AdvanceReply{Error: err.Error()}
	}
	return rep
}

// Advance moves the clock to day (one day at a time from the current day;
// the first call sets the campaign start). For each new day d it forms the
// groups of round d−1, writes their rosters and then a Tick(d) to every
// partition of "vectors", and only then sets the clock, so clients pinging
// on day d find their groups and the aggregator sees rosters before any
// submission. Calling it again for the current day is a no-op.
func (c *Coordinator) Advance(ctx context.Context, day int32) (blind.AdvanceReply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok, err := c.Day(ctx)
	if err != nil {
		return blind.AdvanceReply{}, err
	}
	if !ok {
		if _, err := c.kv.Put(ctx, "start."+c.Campaign.Name, []byte(strconv.Itoa(int(day)))); err != nil {
			return blind.AdvanceReply{}, err
		}
		cur = day - 1
	} else if _, err := c.kv.Get(ctx, "start."+c.Campaign.Name); errors.Is(err, jetstream.ErrKeyNotFound) {
		if _, err := c.kv.Put(ctx, "start."+c.Campaign.Name, []byte(strconv.Itoa(int(cur)))); err != nil {
			return blind.AdvanceReply{}, err
		}
	}
	if day <= cur {
		return blind.AdvanceReply{Day: cur}, nil
	}
	var rep blind.AdvanceReply
	for d := cur + 1; d <= day; d++ {
		if rep, err = c.advanceOne(ctx, d); err != nil {
			return rep, fmt.Errorf("coordinator: advance to day %s: %w", keywords.Day(d), err)
		}
	}
	return rep, nil
}

func (c *Coordinator) advanceOne(ctx context.Context, d int32) (blind.AdvanceReply, error) {
	cp := c.Campaign
	round := d - 1
	start, err := c.start(ctx)
	if err != nil {
		return blind.AdvanceReply{}, err
	}
	// the clients active on the round's day, from the index their pings
	// wrote (not every client record); PDD eq. 5 and the deterministic
	// shuffle are FormGroups'
	entries, err := ActiveOn(ctx, c.js, cp.Name, round)
	if err != nil {
		return blind.AdvanceReply{}, err
	}
	nActive, formed := FormGroups(cp.Name, round, entries, start, cp.GroupSize, cp.Delay, cp.Heuristic, cp.End)
	G, grouped := len(formed), 0
	for _, g := range formed {
		grouped += len(g)
	}
	deadline := round + 1 + int32(cp.Delay)
	var rosters []kafka.Message
	for g, group := range formed {
		in := blind.Instance{Campaign: cp.Name, Round: round, Group: uint32(g)}
		n := len(group)
		rec := groupRec{T: blind.Threshold(n), Deadline: deadline, RecoverBy: deadline + int32(cp.RecoveryDays)}
		for _, e := range group {
			rec.Members = append(rec.Members, e.ID)
			rec.Pubs = append(rec.Pubs, e.Public)
		}
		members := rec.Members
		v, _ := json.Marshal(rec)
		if _, err := c.rounds.Put(ctx, groupKey(in), v); err != nil {
			return blind.AdvanceReply{}, err
		}
		for i, id := range members {
			if _, err := c.rounds.Put(ctx, memberKey(cp.Name, round, id), []byte(fmt.Sprintf("%d.%d", g, i))); err != nil {
				return blind.AdvanceReply{}, err
			}
		}
		ro := blind.Roster{Instance: in, N: uint16(n), T: uint16(rec.T), Deadline: deadline, RecoverBy: rec.RecoverBy,
			Groups: uint32(G), Active: uint32(nActive), Grouped: uint32(grouped), L: uint32(cp.List.Len()), ListHash: c.hash}
		b, _ := ro.MarshalBinary()
		key := []byte(in.String())
		m, err := c.control("roster", key, b, c.partitionOf(key))
		if err != nil {
			return blind.AdvanceReply{}, err
		}
		rosters = append(rosters, m)
	}
	if len(rosters) > 0 {
		if err := c.w.WriteMessages(ctx, rosters...); err != nil {
			return blind.AdvanceReply{}, fmt.Errorf("write rosters: %w", err)
		}
	}
	tb, _ := (&blind.Tick{Day: d}).MarshalBinary()
	ticks := make([]kafka.Message, c.partitions)
	for p := range ticks {
		if ticks[p], err = c.control("tick", nil, tb, p); err != nil {
			return blind.AdvanceReply{}, err
		}
	}
	if err := c.tickW.WriteMessages(ctx, ticks...); err != nil {
		return blind.AdvanceReply{}, fmt.Errorf("write ticks: %w", err)
	}
	if _, err := c.kv.Put(ctx, "clock", []byte(strconv.Itoa(int(d)))); err != nil {
		return blind.AdvanceReply{}, err
	}
	c.Logger.Info("coordinator: day advanced", "campaign", cp.Name, "day", keywords.Day(d).String(),
		"round", keywords.Day(round).String(), "active", nActive, "grouped", grouped, "groups", G)
	return blind.AdvanceReply{Day: d, Groups: G, Active: nActive, Grouped: grouped}, nil
}

func groupKey(in blind.Instance) string {
	return fmt.Sprintf("group.%s.%d.%d", in.Campaign, in.Round, in.Group)
}

func memberKey(campaign string, round int32, id string) string {
	return fmt.Sprintf("member.%s.%d.%s", campaign, round, id)
}

// errRefused carries a refusal reason out of authenticate.
type errRefused struct{ reason, msg string }

func (e *errRefused) Error() string { return e.msg }

// errorReply is the reply text for a handler's error: a refusal is counted
// by its reason, anything else is reported as the coordinator's failure.
func (c *Coordinator) errorReply(err error) string {
	var rf *errRefused
	if errors.As(err, &rf) {
		return c.refuse(rf.reason, "%s", rf.msg)
	}
	return "coordinator: " + err.Error()
}

// authenticate verifies a client's signed request under its registered
// key, and that seq is above the last accepted one; it records seq and,
// when day ≥ 0, day as an active day (compare-and-set, so concurrent
// requests of one client cannot both pass with one seq).
func (c *Coordinator) authenticate(ctx context.Context, id string, sig *blind.Signed, purpose string, seq uint64, day int32) (*clientRec, error) {
	for {
		e, err := c.kv.Get(ctx, "client."+id)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil, &errRefused{RefusedUnknown, "unknown client id: register first"}
			}
			return nil, err
		}
		var rec clientRec
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return nil, err
		}
		if err := sig.Verify(rec.Sign, purpose); err != nil {
			return nil, &errRefused{RefusedSignature, fmt.Sprintf("%s of client %s: %v", purpose, id, err)}
		}
		if seq <= rec.LastSeq {
			return nil, &errRefused{RefusedReplay, fmt.Sprintf("%s of client %s: sequence %d not above %d (a replayed or reordered request)", purpose, id, seq, rec.LastSeq)}
		}
		rec.LastSeq = seq
		if n := len(rec.Days); day >= 0 && (n == 0 || rec.Days[n-1] < day) {
			rec.Days = append(rec.Days, day)
		}
		v, _ := json.Marshal(rec)
		if _, err := c.kv.Update(ctx, "client."+id, v, e.Revision()); err == nil {
			return &rec, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, err
		}
	}
}

func (c *Coordinator) handlePing(ctx context.Context, b []byte) any {
	p, sig, err := blind.ParsePing(b)
	if err != nil {
		return blind.Instructions{Error: c.refuse(RefusedMalformed, "ping: %v", err)}
	}
	if p.Campaign != c.Campaign.Name {
		return blind.Instructions{Error: fmt.Sprintf("coordinator: no campaign %q (this coordinator runs %q)", p.Campaign, c.Campaign.Name)}
	}
	ins, err := c.instructions(ctx, p.ClientID, sig, p.Seq)
	if err != nil {
		return blind.Instructions{Error: c.errorReply(err)}
	}
	return ins
}

func (c *Coordinator) membership(ctx context.Context, round int32, id string) (blind.Instance, int, *groupRec, bool, error) {
	cp := c.Campaign.Name
	e, err := c.rounds.Get(ctx, memberKey(cp, round, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return blind.Instance{}, 0, nil, false, nil
	}
	if err != nil {
		return blind.Instance{}, 0, nil, false, err
	}
	var g, i int
	if _, err := fmt.Sscanf(string(e.Value()), "%d.%d", &g, &i); err != nil {
		return blind.Instance{}, 0, nil, false, err
	}
	in := blind.Instance{Campaign: cp, Round: round, Group: uint32(g)}
	ge, err := c.rounds.Get(ctx, groupKey(in))
	if err != nil {
		return blind.Instance{}, 0, nil, false, err
	}
	var rec groupRec
	if err := json.Unmarshal(ge.Value(), &rec); err != nil {
		return blind.Instance{}, 0, nil, false, err
	}
	return in, i, &rec, true, nil
}

func (c *Coordinator) instructions(ctx context.Context, id string, sig *blind.Signed, seq uint64) (blind.Instructions, error) {
	cp := c.Campaign
	day, ok, err := c.Day(ctx)
	if err != nil {
		return blind.Instructions{}, err
	}
	if !ok {
		return blind.Instructions{}, errors.New("the campaign has not started (no day advanced yet)")
	}
	rec, err := c.authenticate(ctx, id, sig, blind.PurposePing, seq, day)
	if err != nil {
		return blind.Instructions{}, err
	}
	// index the client as active today (idempotent: every ping of the day
	// records the same entry, so a retried ping after a failed record counts)
	start, err := c.start(ctx)
	if err != nil {
		return blind.Instructions{}, err
	}
	prior := 0
	for _, x := range rec.Days {
		if x >= start && x < day {
			prior++
		}
	}
	if err := RecordActive(ctx, c.js, cp.Name, day, ActiveEntry{ID: id, Public: rec.Public, Sign: rec.Sign, Prior: prior}); err != nil {
		return blind.Instructions{}, fmt.Errorf("record activity: %w", err)
	}
	ins := blind.Instructions{Day: day, Campaign: cp.Name, Keywords: cp.ListName, L: cp.List.Len(), ListHash: c.hash[:]}
	oldest := day - 2 - int32(cp.Delay) - int32(cp.RecoveryDays)
	for r := oldest; r <= day-1; r++ {
		in, i, g, ok, err := c.membership(ctx, r, id)
		if err != nil || !ok {
			if err != nil {
				return blind.Instructions{}, err
			}
			continue
		}
		task := blind.Task{Round: r, Group: in.Group, Member: i, Members: g.Pubs, T: g.T, Deadline: g.Deadline}
		if c.SignKey != nil {
			// the client verifies its roster under the key it pinned
			blind.SignTask(c.SignKey, cp.Name, &task)
		}
		if day <= g.Deadline {
			if _, err := c.rounds.Get(ctx, markKey("deposited", in, i)); errors.Is(err, jetstream.ErrKeyNotFound) {
				ins.Tasks = append(ins.Tasks, task)
				continue
			}
		}
		if day > g.RecoverBy {
			continue
		}
		// the unmasking request: after the deadline, or as soon as every
		// member submitted
		re, err := c.rounds.Get(ctx, recoveryKey(in))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		} else if err != nil {
			return blind.Instructions{}, err
		}
		var req blind.Request
		if err := json.Unmarshal(re.Value(), &req); err != nil {
			return blind.Instructions{}, err
		}
		if slices.Contains(req.Dropped, uint16(i)) {
			continue
		}
		if _, err := c.rounds.Create(ctx, markKey("served", in, i), nil); err != nil {
			continue // served before (or a concurrent ping)
		}
		// the bundles are fetched page by page on PDDBundlesSubject
		ins.Recoveries = append(ins.Recoveries, blind.RecoveryTask{Task: task, Dropped: req.Dropped})
	}
	return ins, nil
}

func markKey(kind string, in blind.Instance, member int) string {
	return fmt.Sprintf("%s.%s.%d.%d.%d", kind, in.Campaign, in.Round, in.Group, member)
}

func recoveryKey(in blind.Instance) string {
	return fmt.Sprintf("recovery.%s.%d.%d", in.Campaign, in.Round, in.Group)
}

func bundleKey(in blind.Instance, to, from uint16) string {
	return fmt.Sprintf("bundle.%s.%d.%d.%d.%d", in.Campaign, in.Round, in.Group, to, from)
}

// maxChunkBytes bounds the JSON of one bundles page
// (blind.MaxMessageBytes; tests lower it to see several pages).
var maxChunkBytes = blind.MaxMessageBytes

// bundlesPage returns the stored bundles addressed to member to of in from
// dealers offset, offset+1, … < n (a dealer with none stored is skipped),
// as many as fit in maxChunkBytes of JSON (at least one), and the dealer
// index to continue from, or −1 when no dealer below n is left.
func (c *Coordinator) bundlesPage(ctx context.Context, in blind.Instance, to, offset, n int) ([]blind.SealedBundle, int, error) {
	var out []blind.SealedBundle
	size := blind.MessageOverhead
	for from := offset; from < n; from++ {
		e, err := c.rounds.Get(ctx, bundleKey(in, uint16(to), uint16(from)))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		sb := blind.SealedBundle{From: uint16(from), To: uint16(to), Ciphertext: e.Value()}
		s := blind.BundleJSONSize(sb)
		if len(out) > 0 && size+s > maxChunkBytes {
			return out, from, nil
		}
		size += s
		out = append(out, sb)
	}
	return out, -1, nil
}

// handleBundles answers a survivor's blind.BundlesRequest with one page of
// the bundles addressed to it. Refused: a malformed request, an unknown
// client or group, a bad signature or replayed Seq, a caller that is not
// the roster's member Member (not_member), no stored recovery request for
// the group (unknown), or Member in its Dropped list (not_member: only
// survivors answer).
func (c *Coordinator) handleBundles(ctx context.Context, b []byte) any {
	r, sig, err := blind.ParseBundles(b)
	if err != nil {
		return blind.BundlesReply{Next: -1, Error: c.refuse(RefusedMalformed, "bundles: %v", err)}
	}
	if r.Campaign != c.Campaign.Name {
		return blind.BundlesReply{Next: -1, Error: fmt.Sprintf("coordinator: no campaign %q (this coordinator runs %q)", r.Campaign, c.Campaign.Name)}
	}
	in := blind.Instance{Campaign: r.Campaign, Round: r.Round, Group: r.Group}
	if _, err := c.authenticate(ctx, r.ClientID, sig, blind.PurposeBundles, r.Seq, -1); err != nil {
		return blind.BundlesReply{Next: -1, Error: c.errorReply(err)}
	}
	ge, err := c.rounds.Get(ctx, groupKey(in))
	if err != nil {
		return blind.BundlesReply{Next: -1, Error: c.refuse(RefusedUnknown, "bundles: no group %s: %v", in, err)}
	}
	var g groupRec
	if err := json.Unmarshal(ge.Value(), &g); err != nil {
		return blind.BundlesReply{Next: -1, Error: err.Error()}
	}
	if r.Member >= len(g.Members) || g.Members[r.Member] != r.ClientID {
		return blind.BundlesReply{Next: -1, Error: c.refuse(RefusedNotMember, "bundles of member %d of %s: client %s is not that member", r.Member, in, r.ClientID)}
	}
	re, err := c.rounds.Get(ctx, recoveryKey(in))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return blind.BundlesReply{Next: -1, Error: c.refuse(RefusedUnknown, "bundles of member %d of %s: no recovery request for the group", r.Member, in)}
	} else if err != nil {
		return blind.BundlesReply{Next: -1, Error: "coordinator: " + err.Error()}
	}
	var req blind.Request
	if err := json.Unmarshal(re.Value(), &req); err != nil {
		return blind.BundlesReply{Next: -1, Error: "coordinator: " + err.Error()}
	}
	if slices.Contains(req.Dropped, uint16(r.Member)) {
		return blind.BundlesReply{Next: -1, Error: c.refuse(RefusedNotMember, "bundles of member %d of %s: the member dropped (only survivors answer)", r.Member, in)}
	}
	page, next, err := c.bundlesPage(ctx, in, r.Member, r.Offset, len(g.Members))
	if err != nil {
		return blind.BundlesReply{Next: -1, Error: "coordinator: bundles: " + err.Error()}
	}
	return blind.BundlesReply{Bundles: page, Next: next}
}

// handleDeposit stores one chunk of a member's deposit
// (blind.DepositRequest): its bundles, as KV entries
// bundle.<campaign>.<round>.<group>.<to>.<from>. On the last chunk it checks
// that the dealer's bundles for all n holders are stored (refused as
// malformed, naming the missing holders, when not: the client sends the
// whole deposit again) and that it carries n roots, then writes the
// commitments to Kafka and the "deposited" mark, so the mark means a
// complete deposit.
func (c *Coordinator) handleDeposit(ctx context.Context, b []byte) any {
	d, sig, err := blind.ParseDeposit(b)
	if err != nil {
		return blind.Reply{Error: c.refuse(RefusedMalformed, "deposit: %v", err)}
	}
	in := blind.Instance{Campaign: d.Campaign, Round: d.Round, Group: d.Group}
	ge, err := c.rounds.Get(ctx, groupKey(in))
	if err != nil {
		return blind.Reply{Error: c.refuse(RefusedUnknown, "deposit: no group %s: %v", in, err)}
	}
	var g groupRec
	if err := json.Unmarshal(ge.Value(), &g); err != nil {
		return blind.Reply{Error: err.Error()}
	}
	if int(d.From) >= len(g.Members) || g.Members[d.From] != d.ClientID {
		return blind.Reply{Error: c.refuse(RefusedNotMember, "deposit for member %d of %s: client %s is not that member", d.From, in, d.ClientID)}
	}
	if _, err := c.authenticate(ctx, d.ClientID, sig, blind.PurposeDeposit, d.Seq, -1); err != nil {
		return blind.Reply{Error: c.errorReply(err)}
	}
	n := len(g.Members)
	if d.Last() && len(d.Roots) != n {
		return blind.Reply{Error: c.refuse(RefusedMalformed, "deposit for %s: %d roots, want %d", in, len(d.Roots), n)}
	}
	var futs []jetstream.PubAckFuture
	for _, sb := range d.Bundles {
		if int(sb.To) >= n {
			return blind.Reply{Error: c.refuse(RefusedMalformed, "deposit: bundle for a member outside the group")}
		}
		f, err := c.js.PublishAsync("$KV.crowdlog_pdd_rounds."+bundleKey(in, sb.To, sb.From), sb.Ciphertext)
		if err != nil {
			return blind.Reply{Error: err.Error()}
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return blind.Reply{Error: "coordinator: store bundle: " + err.Error()}
		case <-ctx.Done():
			return blind.Reply{Error: ctx.Err().Error()}
		}
	}
	if !d.Last() {
		return blind.Reply{}
	}
	missing, err := c.missingBundles(ctx, in, d.From, n)
	if err != nil {
		return blind.Reply{Error: "coordinator: " + err.Error()}
	}
	if len(missing) > 0 {
		return blind.Reply{Error: c.refuse(RefusedMalformed, "deposit of member %d for %s: bundles for %d of %d holders missing (holders %s) after the last of %d chunks: send the whole deposit again",
			d.From, in, len(missing), n, holderList(missing), d.Chunks)}
	}
	cm := blind.Commitments{Instance: in, Member: d.From, Roots: make([][32]byte, n)}
	for h, r := range d.Roots {
		copy(cm.Roots[h][:], r)
	}
	// the commitments reach the aggregator (same partition as the group's
	// vectors) before the member's submission can: it is sent only after
	// this reply
	cb, _ := cm.MarshalBinary()
	key := []byte(in.String())
	msg, err := c.control("commit", key, cb, c.partitionOf(key))
	if err != nil {
		return blind.Reply{Error: "coordinator: " + err.Error()}
	}
	if err := c.w.WriteMessages(ctx, msg); err != nil {
		return blind.Reply{Error: "coordinator: write commitments: " + err.Error()}
	}
	if _, err := c.rounds.Put(ctx, markKey("deposited", in, int(d.From)), nil); err != nil {
		return blind.Reply{Error: err.Error()}
	}
	return blind.Reply{}
}

// missingBundles lists the holders h < n, ascending, with no stored bundle
// from dealer from (keys bundle.<campaign>.<round>.<group>.*.<from>).
func (c *Coordinator) missingBundles(ctx context.Context, in blind.Instance, from uint16, n int) ([]int, error) {
	have := make([]bool, n)
	prefix := fmt.Sprintf("bundle.%s.%d.%d.", in.Campaign, in.Round, in.Group)
	suffix := fmt.Sprintf(".%d", from)
	lister, err := c.rounds.ListKeysFiltered(ctx, prefix+"*"+suffix)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, err
	}
	if err == nil {
		for k := range lister.Keys() {
			to, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(k, prefix), suffix))
			if err == nil && to >= 0 && to < n {
				have[to] = true
			}
		}
	}
	var missing []int
	for h, ok := range have {
		if !ok {
			missing = append(missing, h)
		}
	}
	return missing, nil
}

// holderList names the first 10 holders of hs and counts the others
// ("3, 4, 7"; "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 12 more").
func holderList(hs []int) string {
	var b strings.Builder
	for k, h := range hs[:min(len(hs), 10)] {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(h))
	}
	if len(hs) > 10 {
		fmt.Fprintf(&b, " and %d more", len(hs)-10)
	}
	return b.String()
}

func (c *Coordinator) handleRecovery(ctx context.Context, b []byte) any {
	req, sig, err := blind.ParseRecovery(b)
	if err != nil {
		return blind.Reply{Error: c.refuse(RefusedMalformed, "recovery request: %v", err)}
	}
	if c.AggregatorKey == nil {
		return blind.Reply{Error: c.refuse(RefusedUnconfigured, "recovery request: this coordinator has no aggregator credential (start it with --aggregator-key)")}
	}
	if err := sig.Verify(c.AggregatorKey, blind.PurposeRecovery); err != nil {
		return blind.Reply{Error: c.refuse(RefusedSignature, "recovery request for %s: %v", req.Instance, err)}
	}
	if req.Instance.Campaign != c.Campaign.Name {
		return blind.Reply{Error: "coordinator: recovery for another campaign"}
	}
	ge, err := c.rounds.Get(ctx, groupKey(req.Instance))
	if err != nil {
		return blind.Reply{Error: c.refuse(RefusedUnknown, "recovery request: no group %s", req.Instance)}
	}
	var g groupRec
	if err := json.Unmarshal(ge.Value(), &g); err != nil || len(g.Members) != req.N || g.T != req.T {
		return blind.Reply{Error: c.refuse(RefusedMalformed, "recovery request for %s: n=%d t=%d do not match the group", req.Instance, req.N, req.T)}
	}
	v, _ := json.Marshal(req)
	if _, err := c.rounds.Create(ctx, recoveryKey(req.Instance), v); errors.Is(err, jetstream.ErrKeyExists) {
		// the aggregator's retry of the same request is fine; another is not
		if e, gerr := c.rounds.Get(ctx, recoveryKey(req.Instance)); gerr != nil || string(e.Value()) != string(v) {
			return blind.Reply{Error: c.refuse(RefusedConflict, "recovery request for %s differs from the one already stored", req.Instance)}
		}
	} else if err != nil {
		return blind.Reply{Error: err.Error()}
	}
	c.Logger.Debug("coordinator: recovery requested", "instance", req.Instance.String(), "dropped", len(req.Dropped), "n", req.N)
	return blind.Reply{}
}

// NATSRecoverer forwards the aggregator's recovery requests to the
// coordinator over NATS, signed with the aggregator's credential Key
// (satisfies vectors.Recoverer).
type NATSRecoverer struct {
	NC  *nats.Conn
	Key ed25519.PrivateKey
}

// Ask signs req, sends it and waits for the coordinator's acknowledgement.
// A refusal (bad credential, a conflicting request) wraps blind.ErrRefused:
// it would be refused again, so it is not worth a retry — check the
// aggregator's --sign-key against the coordinator's --aggregator-key.
func (r NATSRecoverer) Ask(ctx context.Context, req blind.Request) error {
	signed, err := blind.SignMessage(r.Key, blind.PurposeRecovery, req)
	if err != nil {
		return err
	}
	var rep blind.Reply
	if err := natsconn.RequestJSON(ctx, r.NC, protocol.PDDRecoverySubject, signed, &rep); err != nil {
		return err
	}
	if rep.Error != "" {
		if strings.Contains(rep.Error, "refused (") {
			// a refusal (bad credential, conflicting request) does not
			// change on retry
			return fmt.Errorf("%w: %s", blind.ErrRefused, rep.Error)
		}
		return errors.New(rep.Error)
	}
	return nil
}

// NATSAdvance asks the coordinator to start day, signed with the
// operator's credential key (the coordinator's OperatorKey must be its
// public half), and returns the coordinator's reply. Errors: the NATS
// request's, or the coordinator's refusal (a bad signature, a day not
// after the current one is not an error: the reply says the current day).
func NATSAdvance(ctx context.Context, nc *nats.Conn, key ed25519.PrivateKey, day int32) (blind.AdvanceReply, error) {
	signed, err := blind.SignMessage(key, blind.PurposeAdvance, blind.AdvanceRequest{Day: day})
	if err != nil {
		return blind.AdvanceReply{}, err
	}
	var rep blind.AdvanceReply
	if err := natsconn.RequestJSON(ctx, nc, protocol.PDDAdvanceSubject, signed, &rep); err != nil {
		return rep, err
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}
