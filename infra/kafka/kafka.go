// Package kafka starts a local Kafka-protocol broker (kfake, persisted to a
// directory) for one-machine use, and holds the topic helpers the relays,
// aggregators and release stages share, among them ServeGroup, the one
// consumer loop of the aggregators and release stages (Kafka via
// segmentio/kafka-go; kfake with DataDir for one machine, a real Kafka
// cluster in production with the same client code). Config.Brokers runs
// several kfake brokers in one process (the chaos test's 3-broker cluster).
//
// Every client built here authenticates with the Auth of its context
// (WithAuth: TLS and SASL/SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN, auth.go),
// and ACLTable is what each role may do on the cluster (acl.go: ApplyACLs
// on a real cluster; Config.Admin, Users and ACLs on a local broker).
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Config describes a local broker. Dir is required.
type Config struct {
	// Dir is where the broker persists topics, records and committed group
	// offsets; a new broker on the same Dir restores them (also after a
	// crash).
	Dir string
	// Partitions is the default partition count of topics created without
	// an explicit count; 0 means 8.
	Partitions int
	// Port to listen on (127.0.0.1 only); 0 picks a free random port.
	// Only for a single broker.
	Port int
	// Brokers is the number of brokers, each on its own random port, in
	// this one process; 0 means 1. They share one copy of the data (see
	// EnsureTopics on replication), but partition leadership and the group
	// coordinators are spread over them, so clients exercise the
	// multi-broker routing a real cluster needs. A Dir written with one
	// broker count should be reopened with the same count.
	Brokers int
	// SyncWrites fsyncs every produced batch before acknowledging it, so an
	// acknowledged record survives a power loss, not only a process crash.
	// Measured on 2 cores (BenchmarkProduce: 700-byte records in
	// 256-record WriteMessages calls, 8 partitions): ~29k records/s
	// without, ~24k with, i.e. about 20% slower; Start turns it on.
	SyncWrites bool
	// Logger receives broker warnings and errors; nil means silent.
	Logger *slog.Logger
	// TLS, when set, makes every listener TLS with this server
	// configuration (its Certificates; ClientCAs and ClientAuth for mutual
	// TLS). Clients then need an Auth with TLS.
	TLS *tls.Config
	// Admin, when set, turns SASL on (every client must authenticate) with
	// this super user, which bypasses ACLs: topic creation, retention,
	// ApplyACLs. Its Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Admin *Credential
	// Users are the role credentials of a broker with Admin set; with
	// ACLs each is seeded with its role's rows of ACLTable (a user listed
	// under several roles: the rows of each, e.g. RoleAggregator and
	// RoleScheduler).
	Users []User
	// ACLs turns authorization on: a user may do only what its ACLs
	// allow (Users' rows of ACLTable, and what ApplyACLs adds); the Admin
	// may do anything. Needs Admin.
	ACLs bool
}

// Credential is a SASL user: mechanism (MechanismSCRAMSHA512, …), name and
// password.
type Credential struct {
	Mechanism, User, Password string
}

// User is a role's credential on a local broker (Config.Users). Role ""
// gets no row of ACLTable: a credential with no right at all (a client's,
// or one whose ACLs ApplyACLs creates later).
type User struct {
	Role Role
	Credential
}

// AuthConfig returns the client configuration of c with TLS verified by
// the CA in caFile ("" for none).
func (c Credential) AuthConfig(caFile string) AuthConfig {
	return AuthConfig{TLS: caFile != "", CAFile: caFile, Mechanism: c.Mechanism, User: c.User, Password: c.Password}
}

// Broker is a running local Kafka-protocol broker (or several, see
// Config.Brokers).
type Broker struct {
	// Addr is the bootstrap address "127.0.0.1:port" of the first broker.
	Addr string
	// Addrs are the addresses of all brokers, Addr first.
	Addrs []string

	c *kfake.Cluster
}

// Start runs a single-broker kfake cluster persisted in dir, listening on
// 127.0.0.1 with a random port, with partitions as the default partition
// count and SyncWrites on; see Config.Start.
func Start(ctx context.Context, dir string, partitions int) (*Broker, error) {
	return Config{Dir: dir, Partitions: partitions, SyncWrites: true}.Start(ctx)
}

// Start runs the broker described by c. It returns when the broker accepts
// connections. Errors say whether the port or the data directory is the
// problem.
func (c Config) Start(ctx context.Context) (*Broker, error) {
	if c.Dir == "" {
		return nil, errors.New("kafka: Config.Dir is empty (give a directory for the broker's data)")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("kafka: create data dir: %w", err)
	}
	parts := c.Partitions
	if parts <= 0 {
		parts = 8
	}
	opts := []kfake.Opt{
		kfake.DataDir(c.Dir),
		kfake.DefaultNumPartitions(parts),
		kfake.ClusterID("crowdlog-local"),
	}
	brokers := max(c.Brokers, 1)
	switch {
	case c.Port != 0 && brokers > 1:
		return nil, fmt.Errorf("kafka: Config.Port is for a single broker; leave it 0 with Brokers = %d (random ports)", brokers)
	case c.Port != 0:
		opts = append(opts, kfake.Ports(c.Port))
	default:
		opts = append(opts, kfake.NumBrokers(brokers))
	}
	if c.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	if c.Logger != nil {
		opts = append(opts, kfake.WithLogger(slogLogger{c.Logger}))
	}
	if c.TLS != nil {
		opts = append(opts, kfake.TLS(c.TLS))
	}
	switch {
	case c.Admin == nil && (len(c.Users) > 0 || c.ACLs):
		return nil, errors.New("kafka: Config.Users and Config.ACLs need Config.Admin (the super user that creates topics and ACLs)")
	case c.Admin != nil:
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(c.Admin.Mechanism, c.Admin.User, c.Admin.Password))
		// a user listed under several roles (an aggregator that also
		// holds RoleScheduler) gets the rows of each
		roles := map[string][]Role{}
		var order []Credential
		for _, u := range c.Users {
			if _, seen := roles[u.User]; !seen {
				order = append(order, u.Credential)
			}
			roles[u.User] = append(roles[u.User], u.Role)
		}
		for _, u := range order {
			var acls []kfake.ACL
			if c.ACLs {
				acls = kfakeACLs(roles[u.User]...)
			}
			opts = append(opts, kfake.User(u.Mechanism, u.User, u.Password, acls...))
		}
		if c.ACLs {
			opts = append(opts, kfake.EnableACLs())
		}
	}
	cl, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: start local broker (port %d, dir %s): %w", c.Port, c.Dir, err)
	}
	addrs := cl.ListenAddrs()
	if len(addrs) == 0 {
		cl.Close()
		return nil, errors.New("kafka: local broker has no listener")
	}
	b := &Broker{Addr: addrs[0], Addrs: addrs, c: cl}
	// Wait until every listener accepts (they start in goroutines).
	var d net.Dialer
	for _, addr := range addrs {
		for {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
				break
			}
			if ctx.Err() != nil {
				cl.Close()
				return nil, fmt.Errorf("kafka: local broker not reachable at %s: %w", addr, ctx.Err())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return b, nil
}

// Bootstrap returns all broker addresses joined by commas, the form every
// crowdlog --kafka flag accepts.
func (b *Broker) Bootstrap() string { return strings.Join(b.Addrs, ",") }

// Close stops the broker and writes its state to Dir. Safe to call more
// than once.
func (b *Broker) Close() {
	if b == nil || b.c == nil {
		return
	}
	b.c.Close()
}

// Cluster returns the underlying kfake cluster (for fault injection in tests).
func (b *Broker) Cluster() *kfake.Cluster { return b.c }

// clientCtx returns a kafka-go admin client with its own Transport (the
// shared default transport caches stale metadata, docs/decisions.md),
// authenticated with AuthFrom(ctx).
func clientCtx(ctx context.Context, addr string) *kafkago.Client {
	return &kafkago.Client{Addr: kafkago.TCP(addr), Timeout: 10 * time.Second, Transport: Transport(ctx)}
}

// MaxReplication is the largest replication factor EnsureTopics asks for.
const MaxReplication = 3

// EnsureTopics creates topics with the given partition count at the broker
// addr (kafka-go CreateTopics), with replication factor min(MaxReplication,
// brokers in the cluster): 1 on a single broker, 3 on a cluster of 3 or more.
// Existing topics are fine and are left unchanged, whatever their partition
// count or replication (check the count with Partitions). Errors name the
// topic that failed.
//
// On kfake (Config.Brokers > 1) the factor is accepted only up to the
// number of brokers, recorded, persisted and reported in Metadata (replica
// and ISR lists), but it is nominal: the brokers of one kfake process share
// a single copy of every partition, produce requests are acknowledged at
// once with nothing to replicate (its produce handler: "no replication to
// wait on"), and leadership moves only on request. So there it checks that
// topic creation and clients handle a replicated layout, not that data
// survives a broker loss.
func EnsureTopics(ctx context.Context, addr string, partitions int, topics ...string) error {
	if partitions <= 0 {
		return fmt.Errorf("kafka: EnsureTopics needs partitions > 0, got %d", partitions)
	}
	if len(topics) == 0 {
		return nil
	}
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	meta, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{}})
	if err != nil {
		return fmt.Errorf("kafka: metadata from %s: %w (is the broker running?)", addr, err)
	}
	replication := max(1, min(MaxReplication, len(meta.Brokers)))
	req := &kafkago.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafkago.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: replication})
	}
	resp, err := cl.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("kafka: create topics at %s: %w (is the broker running?)", addr, err)
	}
	for _, t := range topics {
		if err := resp.Errors[t]; err != nil && !errors.Is(err, kafkago.TopicAlreadyExists) {
			return fmt.Errorf("kafka: create topic %q: %w", t, err)
		}
	}
	return nil
}

// Partitions returns the partition count of topic at the broker addr. A
// missing topic is an error wrapping kafka-go's UnknownTopicOrPartition
// (create it with EnsureTopics).
func Partitions(ctx context.Context, addr, topic string) (int, error) {
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	resp, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("kafka: metadata from %s: %w (is the broker running?)", addr, err)
	}
	for _, t := range resp.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return 0, fmt.Errorf("kafka: topic %q: %w", topic, t.Error)
		}
		return len(t.Partitions), nil
	}
	return 0, fmt.Errorf("kafka: topic %q: %w", topic, kafkago.UnknownTopicOrPartition)
}

// NewWriter returns a synchronous kafka-go Writer for topic at addr, set up
// the way crowdlog produces: its own Transport, messages hashed to
// partitions by key (kafka-go Hash balancer), acks from all in-sync replicas,
// and a 2 ms batch timeout so a WriteMessages call of a relay batch returns
// promptly. It connects in plaintext without SASL; NewWriterAuth
// authenticates. Close it with CloseWriter when done (its Close alone
// leaves the Transport running).
func NewWriter(addr, topic string) *kafkago.Writer { return NewWriterAuth(nil, addr, topic) }

// NewWriterAuth is NewWriter authenticated with a (nil: plaintext).
func NewWriterAuth(a *Auth, addr, topic string) *kafkago.Writer {
	return &kafkago.Writer{
		Addr:         kafkago.TCP(addr),
		Topic:        topic,
		Balancer:     &kafkago.Hash{},
		RequiredAcks: kafkago.RequireAll,
		BatchSize:    1 << 14,
		BatchBytes:   64 << 20,
		BatchTimeout: 2 * time.Millisecond,
		WriteTimeout: 30 * time.Second,
		MaxAttempts:  3,
		Transport:    a.Transport(),
	}
}

// CloseWriter closes w (kafka-go Writer.Close: writes its pending batches
// and waits for them) and then the connections and the metadata goroutine
// of w's own Transport. kafka-go's Close leaves a Transport the caller gave
// (Transport, NewWriterAuth) open: its connection pool keeps refreshing
// the brokers' metadata every few seconds (MetadataTTL) for the life of the
// process, dialing brokers long gone. The error is Close's.
func CloseWriter(w *kafkago.Writer) error {
	err := w.Close()
	if t, ok := w.Transport.(*kafkago.Transport); ok {
		t.CloseIdleConnections()
	}
	return err
}

func closeTransport(cl *kafkago.Client) {
	if t, ok := cl.Transport.(*kafkago.Transport); ok {
		t.CloseIdleConnections()
	}
}

type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		s.l.Error(fmt.Sprintf(msg, args...))
	case kfake.LogLevelWarn:
		s.l.Warn(fmt.Sprintf(msg, args...))
	}
}

// Forward returns a ServeGroup serve function that reads its partition of
// topic from the offset ServeGroup gives it (kafkago.FirstOffset: the
// partition's first message) and sends each message value to msgs, per
// partition in order (partitions interleave), until its context ends; a
// send waits for room in msgs at most that long. It is how the release
// stages, with ServeGroup without a group, read every partition from the
// start on their one apply goroutine. A read error is logged ("read topic",
// with topic and partition) and ends that partition's reader, not the
// others; it returns an error only when the start offset cannot be set.
func Forward(brokers []string, topic string, msgs chan<- []byte, log *slog.Logger) func(ctx context.Context, gen *kafkago.Generation, partition int, from int64) error {
	return forward(brokers, topic, msgs, log, nil)
}

// forward is Forward that also reports each partition's lag after every
// read message (high watermark − next offset) to lag, when not nil.
func forward(brokers []string, topic string, msgs chan<- []byte, log *slog.Logger, lag func(partition int, n int64)) func(ctx context.Context, gen *kafkago.Generation, partition int, from int64) error {
	return func(ctx context.Context, _ *kafkago.Generation, id int, from int64) error {
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: brokers, Topic: topic, Partition: id,
			MinBytes: 1, MaxBytes: 64 << 20, MaxWait: 200 * time.Millisecond, Dialer: Dialer(ctx)})
		defer r.Close()
		if err := r.SetOffset(from); err != nil {
			return fmt.Errorf("read topic %s partition %d from offset %d: %w", topic, id, from, err)
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				if ctx.Err() == nil {
					log.Error("read topic", "topic", topic, "partition", id, "err", err)
				}
				return nil
			}
			if lag != nil {
				lag(id, max(m.HighWaterMark-(m.Offset+1), 0))
			}
			select {
			case msgs <- m.Value:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// Tail is every partition of a topic read from its first message on
// background goroutines (ServeGroup without a group, with Forward) and fed
// to one channel: how the release stages read their whole input topic on
// their one apply goroutine. Start one with ReadTopic.
type Tail struct {
	// Msgs carries the message values, per partition in order.
	Msgs <-chan []byte
	// Done is closed when the readers ended: after Stop, or earlier when
	// the topic's partitions could not be listed (Err then says why).
	Done   <-chan struct{}
	cancel context.CancelFunc
	err    error // ServeGroup's error, set before Done is closed
	lagMu  sync.Mutex
	lag    map[int]int64
}

// Lag returns, per partition, the messages behind the partition's end as
// of its last read message: high watermark − next offset (0 when caught
// up; a message read but not yet taken from Msgs counts as read). A
// partition appears at its first message. For a consumer-lag gauge. A nil
// Tail (a stage that has not started reading) has an empty lag.
func (t *Tail) Lag() map[int]int64 {
	if t == nil {
		return map[int]int64{}
	}
	t.lagMu.Lock()
	defer t.lagMu.Unlock()
	out := make(map[int]int64, len(t.lag))
	for p, n := range t.lag {
		out[p] = n
	}
	return out
}

// ReadTopic starts a Tail of topic (role prefixes logs and errors, as in
// ServeGroup). Call Stop when done.
func ReadTopic(ctx context.Context, brokers []string, topic, role string, log *slog.Logger) *Tail {
	msgs := make(chan []byte, 1024)
	done := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	t := &Tail{Msgs: msgs, Done: done, cancel: cancel, lag: map[int]int64{}}
	setLag := func(p int, n int64) {
		t.lagMu.Lock()
		t.lag[p] = n
		t.lagMu.Unlock()
	}
	go func() {
		defer close(done)
		t.err = ServeGroup(rctx, brokers, "", topic, 0, log, role, forward(brokers, topic, msgs, log, setLag))
	}()
	return t
}

// Err is ServeGroup's error once Done is closed: nil, unless the partitions
// could not be listed ("<role>: topic <topic>: …", "<role>: dial kafka …").
func (t *Tail) Err() error {
	<-t.Done
	return t.err
}

// Stop ends the readers (a blocked read or send returns at once), waits for
// them and returns Err.
func (t *Tail) Stop() error {
	t.cancel()
	return t.Err()
}

// heartbeatInterval is ServeGroup's heartbeat to the group coordinator.
// A member learns that the group is rebalancing from a heartbeat's answer,
// so a join or a graceful leave moves partitions after up to this long
// (at 2 s the wait was most of a small partition's move; kafka-go's
// default is 3 s); two small requests a second per member cost the
// coordinator nothing that matters.
const heartbeatInterval = 500 * time.Millisecond

// ServeGroup joins consumer group id on topic and, for every generation,
// runs serve on its own goroutine for each assigned partition with the
// partition's committed offset (kafkago.FirstOffset when none was
// committed; kafka-go Generation.Start: serve's context ends when the
// generation does, e.g. on a rebalance). session is the session and
// rebalance timeout. It returns nil when ctx ends, an error only when the
// group cannot be joined. role prefixes its log lines and errors. The
// group, and every serve's context, use the Kafka credential of ctx
// (WithAuth).
//
// With id "" there is no group (as kafka-go's ReaderConfig.GroupID ""): it
// lists topic's partitions once and runs serve for every one of them with
// gen nil (nothing to commit) and offset kafkago.FirstOffset, all in one
// generation that ends with ctx; session is unused. This is how a consumer
// that needs the whole topic, such as a release stage, reads it. It then
// returns nil after ctx ended and every serve returned, and an error
// ("<role>: dial kafka <addr>: …" or "<role>: topic <topic>: …") when the
// partitions cannot be listed: the topic does not exist yet or brokers[0]
// is unreachable (10 s dial timeout).
func ServeGroup(ctx context.Context, brokers []string, id, topic string, session time.Duration, log *slog.Logger, role string,
	serve func(ctx context.Context, gen *kafkago.Generation, partition int, committed int64) error) error {
	return ServeGroupAssigned(ctx, brokers, id, topic, session, log, role, nil, serve)
}

// ServeGroupAssigned is ServeGroup that also calls assigned (when not nil)
// with each generation's partitions of topic, in ascending order, before
// their serves start:
// a member learns which partitions it no longer owns (an empty list when it
// owns none) and can free what it kept for them. Without a group (id "")
// it is called once with every partition.
func ServeGroupAssigned(ctx context.Context, brokers []string, id, topic string, session time.Duration, log *slog.Logger, role string,
	assigned func(partitions []int),
	serve func(ctx context.Context, gen *kafkago.Generation, partition int, committed int64) error) error {
	if id == "" {
		return serveAll(ctx, brokers, topic, log, role, assigned, serve)
	}
	auth := AuthFrom(ctx)
	cg, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{
		ID: id, Brokers: brokers, Topics: []string{topic},
		StartOffset: kafkago.FirstOffset,
		// a member learns of a rebalance (another joined or left) at its
		// next heartbeat: every partition move waits up to one interval
		HeartbeatInterval: heartbeatInterval, SessionTimeout: session, RebalanceTimeout: session,
		JoinGroupBackoff: time.Second, WatchPartitionChanges: true,
		Dialer: Dialer(ctx),
	})
	if err != nil {
		return fmt.Errorf("%s: join consumer group %s: %w", role, id, err)
	}
	defer cg.Close()
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafkago.ErrGroupClosed) {
				return nil
			}
			log.Warn(role+": consumer group", "err", err)
			continue
		}
		ids := []int{}
		for _, a := range gen.Assignments[topic] {
			ids = append(ids, a.ID)
		}
		slices.Sort(ids)
		if assigned != nil {
			assigned(ids)
		}
		for _, a := range gen.Assignments[topic] {
			gen.Start(func(gctx context.Context) {
				// kafka-go's generation context does not descend from ctx:
				// carry ctx's Kafka credential over (WithAuth)
				gctx = WithAuth(gctx, auth)
				if err := serve(gctx, gen, a.ID, a.Offset); err != nil && gctx.Err() == nil {
					log.Error(role+": partition stopped", "partition", a.ID, "err", err)
				}
			})
		}
		log.Info(role+": assigned", "generation", gen.ID, "partitions", ids)
	}
}

// serveAll is ServeGroup without a group: serve on every partition of
// topic from its first offset, until ctx ends.
func serveAll(ctx context.Context, brokers []string, topic string, log *slog.Logger, role string,
	assigned func([]int), serve func(ctx context.Context, gen *kafkago.Generation, partition int, committed int64) error) error {
	conn, err := Dialer(ctx).DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return fmt.Errorf("%s: dial kafka %s: %w", role, brokers[0], err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return fmt.Errorf("%s: topic %s: %w", role, topic, err)
	}
	if assigned != nil {
		ids := make([]int, len(parts))
		for i, p := range parts {
			ids[i] = p.ID
		}
		// the broker lists partitions in any order (kfake: map order)
		slices.Sort(ids)
		assigned(ids)
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			if err := serve(ctx, nil, p.ID, kafkago.FirstOffset); err != nil && ctx.Err() == nil {
				log.Error(role+": partition stopped", "partition", p.ID, "err", err)
			}
		})
	}
	// The generation lasts as long as ctx, also when every serve returned
	// early (a partition whose reader failed is not restarted); then the
	// wait for the serves is bounded by their reaction to ctx's end.
	<-ctx.Done()
	wg.Wait()
	return nil
}

// commitMu serializes CommitOffset within the process.
var commitMu sync.Mutex

// CommitOffset commits next (the offset of the next message to read) for
// one partition of topic in gen, the group generation ServeGroup gave the
// partition's serve function; errors as kafka-go's
// Generation.CommitOffsets (the group was rebalanced, the coordinator is
// unreachable). One commit runs at a time per process: the partitions of a
// generation share one coordinator connection, and kafka-go's
// Conn.waitResponse busy-waits (lock, read deadline, peek, unlock) while
// another goroutine's response is due on it. With 8 partition goroutines
// committing concurrently that spin took 7% of the aggregator service's
// CPU (BenchmarkBoundAggregatorService profile); serialized, a commit
// waits its turn asleep, and a commit covers a whole batch (up to
// Service.MaxBatch messages), so the turns are short and few.
func CommitOffset(gen *kafkago.Generation, topic string, partition int, next int64) error {
	commitMu.Lock()
	defer commitMu.Unlock()
	return gen.CommitOffsets(map[string]map[int]int64{topic: {partition: next}})
}
