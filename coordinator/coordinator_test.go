package coordinator

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

type env struct {
	dir     string
	ns      *natsserver.Server
	nc      *nats.Conn
	brokers []string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{dir: t.TempDir()}
	b, err := kafka.Start(ctx, filepath.Join(e.dir, "kafka"), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := kafka.EnsureTopics(ctx, b.Addr, 2, "vectors"); err != nil {
		t.Fatal(err)
	}
	e.brokers = []string{b.Addr}
	e.startNATS(t)
	return e
}

func (e *env) startNATS(t *testing.T) {
	t.Helper()
	ns, err := natsserver.Options{Dir: filepath.Join(e.dir, "nats"), Port: portOf(e.ns)}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e.ns = ns
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	e.nc = nc
	t.Cleanup(func() { nc.Close(); ns.Shutdown() })
}

func portOf(s *natsserver.Server) int {
	if s == nil {
		return 0
	}
	return s.Port
}

func (e *env) coordinator(t *testing.T, cp Campaign) *Coordinator {
	t.Helper()
	c := &Coordinator{NC: e.nc, Brokers: e.brokers, Campaign: cp}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testClient is a registered client's keys and sequence numbers.
type testClient struct {
	id   string
	pub  []byte
	sign ed25519.PrivateKey
	seq  uint64
}

func register(t *testing.T, nc *nats.Conn) *testClient {
	t.Helper()
	k, _ := blind.GenerateKey()
	spub, spriv, _ := ed25519.GenerateKey(rand.Reader)
	signed, _ := blind.SignMessage(spriv, blind.PurposeRegister, blind.RegisterRequest{PublicKey: k.PublicKey().Bytes(), SignKey: spub})
	var rep blind.RegisterReply
	if err := natsconn.RequestJSON(context.Background(), nc, protocol.PDDRegisterSubject, signed, &rep); err != nil || rep.Error != "" {
		t.Fatalf("register: %v %s", err, rep.Error)
	}
	return &testClient{id: rep.ClientID, pub: k.PublicKey().Bytes(), sign: spriv}
}

func (c *testClient) pingMsg() blind.Signed {
	c.seq++
	s, _ := blind.SignMessage(c.sign, blind.PurposePing, blind.PingRequest{ClientID: c.id, Campaign: "flu", Seq: c.seq})
	return s
}

func ping(t *testing.T, nc *nats.Conn, c *testClient) blind.Instructions {
	t.Helper()
	var ins blind.Instructions
	if err := natsconn.RequestJSON(context.Background(), nc, protocol.PDDPingSubject, c.pingMsg(), &ins); err != nil || ins.Error != "" {
		t.Fatalf("ping: %v %s", err, ins.Error)
	}
	return ins
}

// deposit is member tk.Member's deposit in one chunk (fake bundles and
// roots: the coordinator cannot read them anyway) signed by c.
func (c *testClient) deposit(tk blind.Task) blind.Signed {
	c.seq++
	n := len(tk.Members)
	d := blind.DepositRequest{ClientID: c.id, Seq: c.seq, Campaign: "flu", Round: tk.Round, Group: tk.Group, From: uint16(tk.Member),
		Chunk: 0, Chunks: 1}
	for h := 0; h < n; h++ {
		d.Roots = append(d.Roots, make([]byte, 32))
		d.Bundles = append(d.Bundles, blind.SealedBundle{From: uint16(tk.Member), To: uint16(h), Ciphertext: make([]byte, 64)})
	}
	s, _ := blind.SignMessage(c.sign, blind.PurposeDeposit, d)
	return s
}

// Groups are formed from the previous day's active clients, handed out on
// pings with the members' keys, and the coordinator's state — clients,
// clock, groups — survives a restart of the coordinator and of NATS.
func TestGroupsAndRestart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	list, _ := keywords.Parse(stringsReader("flu\nfever\ncough\n"))
	cp := Campaign{Name: "flu", List: list, ListName: "test", GroupSize: 3, Delay: 1}
	c := e.coordinator(t, cp)
	const day = 13000
	if _, err := c.Advance(ctx, day); err != nil {
		t.Fatal(err)
	}
	var ids []*testClient
	for i := 0; i < 7; i++ {
		ids = append(ids, register(t, e.nc))
	}
	// day 13000: clients 0..5 active (6 → two groups of 3); client 6 not
	for _, id := range ids[:6] {
		if ins := ping(t, e.nc, id); len(ins.Tasks) != 0 || ins.L != 3 {
			t.Fatalf("tasks before any group: %+v", ins)
		}
	}
	rep, err := c.Advance(ctx, day+1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Groups != 2 || rep.Active != 6 || rep.Grouped != 6 {
		t.Fatalf("advance: %+v", rep)
	}
	if ins := ping(t, e.nc, ids[6]); len(ins.Tasks) != 0 {
		t.Fatalf("inactive client got a task: %+v", ins.Tasks)
	}
	tasks := map[*testClient]blind.Task{}
	for _, id := range ids[:6] {
		ins := ping(t, e.nc, id)
		if len(ins.Tasks) != 1 || ins.Tasks[0].Round != day || ins.Tasks[0].Deadline != day+2 {
			t.Fatalf("client tasks %+v", ins.Tasks)
		}
		tk := ins.Tasks[0]
		if len(tk.Members) != 3 || !reflect.DeepEqual(tk.Members[tk.Member], id.pub) || tk.T != blind.Threshold(3) {
			t.Fatalf("task does not list the client at its index: %+v", tk)
		}
		tasks[id] = tk
	}

	// restart the coordinator and the NATS server (same store directory)
	c.Close()
	e.nc.Close()
	e.ns.Shutdown()
	e.startNATS(t)
	c2 := e.coordinator(t, cp)
	if d, ok, err := c2.Day(ctx); err != nil || !ok || d != day+1 {
		t.Fatalf("clock after restart: %d %v %v", d, ok, err)
	}
	// re-advancing the current day is a no-op: the groups stay as formed
	if rep, err := c2.Advance(ctx, day+1); err != nil || rep.Day != day+1 {
		t.Fatalf("re-advance: %+v %v", rep, err)
	}
	for _, id := range ids[:6] {
		ins := ping(t, e.nc, id)
		if len(ins.Tasks) != 1 || !reflect.DeepEqual(ins.Tasks[0], tasks[id]) {
			t.Fatalf("task changed across the restart: %+v vs %+v", ins.Tasks, tasks[id])
		}
	}
	// a deposit marks the task done
	tk := tasks[ids[0]]
	var rp blind.Reply
	if err := natsconn.RequestJSON(ctx, e.nc, protocol.PDDDepositSubject, ids[0].deposit(tk), &rp); err != nil || rp.Error != "" {
		t.Fatalf("deposit: %v %s", err, rp.Error)
	}
	if ins := ping(t, e.nc, ids[0]); len(ins.Tasks) != 0 {
		t.Fatalf("task still owed after the deposit: %+v", ins.Tasks)
	}
}

// A recovery request for a group that would leave fewer than t survivors
// (here one) is refused, never stored, never served.
func TestRecoveryRequestValidated(t *testing.T) {
	e := newEnv(t)
	list, _ := keywords.Parse(stringsReader("flu\n"))
	c := e.coordinator(t, Campaign{Name: "flu", List: list, GroupSize: 3})
	_, agg, _ := ed25519.GenerateKey(rand.Reader)
	c.AggregatorKey = agg.Public().(ed25519.PublicKey)
	var rp blind.Reply
	req := blind.Request{Instance: blind.Instance{Campaign: "flu", Round: 1, Group: 0}, N: 3, T: 2, Dropped: []uint16{0, 1}}
	signed, _ := blind.SignMessage(agg, blind.PurposeRecovery, req)
	if err := natsconn.RequestJSON(context.Background(), e.nc, protocol.PDDRecoverySubject, signed, &rp); err != nil {
		t.Fatal(err)
	}
	if rp.Error == "" {
		t.Fatal("one-survivor recovery accepted")
	}
}

func TestNoCoordinatorError(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var rep blind.RegisterReply
	err := natsconn.RequestJSON(ctx, e.nc, protocol.PDDRegisterSubject, blind.Signed{}, &rep)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("want a no-responders error, got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	for _, v := range []any{
		blind.PingRequest{ClientID: "0123456789abcdef0123456789abcdef", Campaign: "flu", Seq: 3},
		blind.RegisterRequest{PublicKey: make([]byte, 32), SignKey: key.Public().(ed25519.PublicKey)},
		blind.DepositRequest{ClientID: "0123456789abcdef0123456789abcdef", Campaign: "flu", Round: 1, From: 1, Roots: [][]byte{make([]byte, 32)},
			Bundles: []blind.SealedBundle{{From: 1, To: 0, Ciphertext: make([]byte, 48)}}},
		blind.DepositRequest{ClientID: "0123456789abcdef0123456789abcdef", Campaign: "flu", Round: 1, From: 1, Chunk: 1, Chunks: 3,
			Bundles: []blind.SealedBundle{{From: 1, To: 2, Ciphertext: make([]byte, 48)}}},
		blind.BundlesRequest{ClientID: "0123456789abcdef0123456789abcdef", Campaign: "flu", Round: 1, Group: 2, Member: 1, Offset: 40},
		blind.Request{Instance: blind.Instance{Campaign: "flu", Round: 1, Group: 0}, N: 5, T: 3, Dropped: []uint16{1}},
		blind.AdvanceRequest{Day: 5},
	} {
		s, _ := blind.SignMessage(key, blind.PurposePing, v)
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte) error{
			func(b []byte) error { _, _, err := blind.ParsePing(b); return err },
			func(b []byte) error { _, err := blind.ParseRegister(b); return err },
			func(b []byte) error { _, _, err := blind.ParseDeposit(b); return err },
			func(b []byte) error { _, _, err := blind.ParseBundles(b); return err },
			func(b []byte) error { _, _, err := blind.ParseRecovery(b); return err },
			func(b []byte) error { _, _, err := blind.ParseAdvance(b); return err },
		} {
			if err := parse(b); err != nil && !errors.Is(err, blind.ErrMalformedCoordination) && !errors.Is(err, blind.ErrBadSignature) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
		}
	})
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

// vectorsRecords reads every record of partition p of topic vectors.
func vectorsRecords(t *testing.T, broker string, p int) []kafkago.Message {
	t.Helper()
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{broker}, Topic: protocol.VectorsTopic, Partition: p, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	conn, err := kafkago.DialLeader(context.Background(), "tcp", broker, protocol.VectorsTopic, p)
	if err != nil {
		t.Fatal(err)
	}
	last, err := conn.ReadLastOffset()
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out []kafkago.Message
	for int64(len(out)) < last {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := r.ReadMessage(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestSignedControlRecords: with SignKey, every roster, tick and commit
// the coordinator writes is a protocol.VectorsControl that verifies under
// its public key, names the topic, the partition it was written to and the
// campaign, carries its issue time as Kafka timestamp, and a roster or
// commit lies in the partition of its group's key (where the relays'
// kafka.Hash balancer puts the members' vectors).
func TestSignedControlRecords(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pub, key, _ := ed25519.GenerateKey(nil)
	list, _ := keywords.Parse(stringsReader("flu\nfever\ncough\n"))
	c := &Coordinator{NC: e.nc, Brokers: e.brokers, Campaign: Campaign{Name: "flu", List: list, ListName: "test", GroupSize: 3, Delay: 1}, SignKey: key}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const day = 13000
	if _, err := c.Advance(ctx, day); err != nil {
		t.Fatal(err)
	}
	var ids []*testClient
	for range 6 {
		id := register(t, e.nc)
		ping(t, e.nc, id)
		ids = append(ids, id)
	}
	if rep, err := c.Advance(ctx, day+1); err != nil || rep.Groups != 2 {
		t.Fatalf("advance: %+v %v", rep, err)
	}
	tk := ping(t, e.nc, ids[0]).Tasks[0]
	var rp blind.Reply
	if err := natsconn.RequestJSON(ctx, e.nc, protocol.PDDDepositSubject, ids[0].deposit(tk), &rp); err != nil || rp.Error != "" {
		t.Fatalf("deposit: %v %s", err, rp.Error)
	}
	kinds := map[string]int{}
	for p := range 2 {
		for _, m := range vectorsRecords(t, e.brokers[0], p) {
			vc, err := protocol.ParseVectorsControl(m.Value)
			if err != nil {
				t.Fatalf("partition %d offset %d: not a signed record: %v", p, m.Offset, err)
			}
			if err := vc.Verify(pub); err != nil || vc.Topic != protocol.VectorsTopic || vc.Partition != p || vc.Campaign != "flu" ||
				m.Time.Unix() < vc.Issued || m.Time.Unix() > vc.NotAfter {
				t.Fatalf("partition %d offset %d: %+v at %v: %v", p, m.Offset, vc, m.Time, err)
			}
			msg, err := blind.Parse(vc.Body)
			if err != nil {
				t.Fatal(err)
			}
			var in *blind.Instance
			switch {
			case msg.Roster != nil:
				kinds["roster"]++
				in = &msg.Roster.Instance
			case msg.Commit != nil:
				kinds["commit"]++
				in = &msg.Commit.Instance
			case msg.Tick != nil:
				kinds["tick"]++
			}
			if in != nil && (&kafkago.Hash{}).Balance(kafkago.Message{Key: []byte(in.String())}, 0, 1) != p {
				t.Fatalf("record of %v in partition %d, not its key's", in, p)
			}
		}
	}
	// day 13000: a tick per partition; day 13001: 2 rosters, a tick per
	// partition; 1 commit
	if kinds["roster"] != 2 || kinds["tick"] != 4 || kinds["commit"] != 1 {
		t.Fatalf("records %v", kinds)
	}
}
