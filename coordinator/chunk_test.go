package coordinator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	kafkago "github.com/segmentio/kafka-go"

	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// chunkBundle is the ciphertext size of the test's bundles: a chunk limit
// of chunkLimit holds two of them, so a group of 5 deposits in 3 chunks
// (2, 2, then 1 with the roots).
const chunkBundle = 3000

var chunkLimit = blind.MessageOverhead + 2*blind.BundleJSONSize(blind.SealedBundle{Ciphertext: make([]byte, chunkBundle)}) + 100

// dealing is member tk.Member's whole deposit with random bundles of
// chunkBundle bytes and random roots (the coordinator cannot read them).
func (c *testClient) dealing(tk blind.Task) blind.DepositRequest {
	d := blind.DepositRequest{ClientID: c.id, Campaign: "flu", Round: tk.Round, Group: tk.Group, From: uint16(tk.Member)}
	for h := range tk.Members {
		r := make([]byte, 32)
		ct := make([]byte, chunkBundle)
		rand.Read(r)
		rand.Read(ct)
		d.Roots = append(d.Roots, r)
		d.Bundles = append(d.Bundles, blind.SealedBundle{From: uint16(tk.Member), To: uint16(h), Ciphertext: ct})
	}
	return d
}

// chunks splits d with limit chunkLimit.
func chunks(t *testing.T, d blind.DepositRequest) []blind.DepositRequest {
	t.Helper()
	parts, err := blind.SplitDeposit(d, chunkLimit)
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

// signChunk signs chunk p with c's next sequence number; its JSON must stay
// within chunkLimit.
func (c *testClient) signChunk(t *testing.T, p blind.DepositRequest) blind.Signed {
	t.Helper()
	c.seq++
	p.Seq = c.seq
	s, _ := blind.SignMessage(c.sign, blind.PurposeDeposit, p)
	if b, _ := json.Marshal(s); len(b) > chunkLimit {
		t.Fatalf("chunk %d of %d: %d bytes of JSON > limit %d", p.Chunk, p.Chunks, len(b), chunkLimit)
	}
	return s
}

// depositAll sends every chunk of d signed by c; a refusal fails the test.
func (c *testClient) depositAll(t *testing.T, e *env, d blind.DepositRequest) {
	t.Helper()
	for _, p := range chunks(t, d) {
		var rp blind.Reply
		if send(t, e, protocol.PDDDepositSubject, c.signChunk(t, p), &rp); rp.Error != "" {
			t.Fatalf("chunk %d of %d: %s", p.Chunk, p.Chunks, rp.Error)
		}
	}
}

func (c *testClient) bundlesMsg(tk blind.Task, member, offset int) blind.Signed {
	c.seq++
	s, _ := blind.SignMessage(c.sign, blind.PurposeBundles, blind.BundlesRequest{ClientID: c.id, Seq: c.seq, Campaign: "flu",
		Round: tk.Round, Group: tk.Group, Member: member, Offset: offset})
	return s
}

// send requests subject with msg and decodes the reply into rep (a
// pointer, zeroed first: a reply without an error leaves none behind).
func send(t *testing.T, e *env, subject string, msg, rep any) {
	t.Helper()
	reflect.ValueOf(rep).Elem().SetZero()
	if err := natsconn.RequestJSON(context.Background(), e.nc, subject, msg, rep); err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
}

// commits returns the commitments on Kafka "vectors" (every partition).
func commits(t *testing.T, e *env) []blind.Commitments {
	t.Helper()
	ctx := context.Background()
	parts, err := ikafka.Partitions(ctx, e.brokers[0], protocol.VectorsTopic)
	if err != nil {
		t.Fatal(err)
	}
	var out []blind.Commitments
	for p := 0; p < parts; p++ {
		conn, err := kafkago.DialLeader(ctx, "tcp", e.brokers[0], protocol.VectorsTopic, p)
		if err != nil {
			t.Fatal(err)
		}
		last, err := conn.ReadLastOffset()
		if err != nil {
			t.Fatal(err)
		}
		if last > 0 {
			if _, err := conn.Seek(0, kafkago.SeekAbsolute); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			batch := conn.ReadBatch(1, 64<<20)
			for {
				m, err := batch.ReadMessage()
				if err != nil {
					t.Fatalf("partition %d: %v", p, err)
				}
				if msg, err := blind.Parse(m.Value); err == nil && msg.Commit != nil {
					out = append(out, *msg.Commit)
				}
				if m.Offset >= last-1 {
					break
				}
			}
			batch.Close()
		}
		conn.Close()
	}
	return out
}

// commitsOf returns member's commitments among cs.
func commitsOf(cs []blind.Commitments, member uint16) []blind.Commitments {
	var out []blind.Commitments
	for _, c := range cs {
		if c.Member == member {
			out = append(out, c)
		}
	}
	return out
}

// A group of 5 whose deposits take 3 chunks each: the bundles of every
// chunk are stored, but the commitments (once) and the "deposited" mark
// only on the last chunk; a deposit missing its middle chunk is refused on
// the last one and accepted when sent again whole; a survivor's bundles
// come back page by page equal to what was deposited for it; a
// non-member, a dropped member, a forged or replayed request, and any
// request before the recovery request is stored, are refused.
func TestChunkedDepositAndBundlePages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	list, _ := keywords.Parse(stringsReader("flu\nfever\n"))
	_, agg, _ := ed25519.GenerateKey(rand.Reader)
	c := e.coordinator(t, Campaign{Name: "flu", List: list, GroupSize: 5, Delay: 1})
	c.AggregatorKey = agg.Public().(ed25519.PublicKey)
	saved := maxChunkBytes
	maxChunkBytes = chunkLimit
	t.Cleanup(func() { maxChunkBytes = saved })
	const day = 13000
	if _, err := c.Advance(ctx, day); err != nil {
		t.Fatal(err)
	}
	cl := make([]*testClient, 5)
	for i := range cl {
		cl[i] = register(t, e.nc)
		ping(t, e.nc, cl[i])
	}
	if rep, err := c.Advance(ctx, day+1); err != nil || rep.Groups != 1 {
		t.Fatalf("advance: %+v %v", rep, err)
	}
	// index the clients by member index
	m := make([]*testClient, 5)
	var tk blind.Task
	for _, x := range cl {
		ins := ping(t, e.nc, x)
		if len(ins.Tasks) != 1 {
			t.Fatalf("tasks %+v", ins.Tasks)
		}
		tk = ins.Tasks[0]
		m[tk.Member] = x
	}
	task := func(i int) blind.Task { x := tk; x.Member = i; return x }
	in := tk.Instance("flu")
	deposited := func(i int) bool {
		_, err := c.rounds.Get(ctx, markKey("deposited", in, i))
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	stored := func(from int) int {
		n := 0
		for to := 0; to < 5; to++ {
			if _, err := c.rounds.Get(ctx, bundleKey(in, uint16(to), uint16(from))); err == nil {
				n++
			}
		}
		return n
	}

	// member 0: three chunks; nothing is accepted before the last
	deals := make([]blind.DepositRequest, 5)
	deals[0] = m[0].dealing(task(0))
	ch := chunks(t, deals[0])
	if len(ch) != 3 || len(ch[0].Bundles) != 2 || len(ch[2].Bundles) != 1 || len(ch[1].Roots) != 0 || len(ch[2].Roots) != 5 {
		t.Fatalf("%d chunks, want 3 (2, 2 and 1 bundles, the roots in the last)", len(ch))
	}
	var rp blind.Reply
	for k, p := range ch[:2] {
		if send(t, e, protocol.PDDDepositSubject, m[0].signChunk(t, p), &rp); rp.Error != "" {
			t.Fatalf("chunk %d: %s", k, rp.Error)
		}
	}
	if deposited(0) || stored(0) != 4 || len(commitsOf(commits(t, e), 0)) != 0 {
		t.Fatalf("before the last chunk: deposited %v, %d bundles stored (want 4), %d commitments",
			deposited(0), stored(0), len(commitsOf(commits(t, e), 0)))
	}
	if ins := ping(t, e.nc, m[0]); len(ins.Tasks) != 1 {
		t.Fatal("task no longer owed before the last chunk")
	}
	if send(t, e, protocol.PDDDepositSubject, m[0].signChunk(t, ch[2]), &rp); rp.Error != "" {
		t.Fatalf("last chunk: %s", rp.Error)
	}
	cs := commitsOf(commits(t, e), 0)
	if !deposited(0) || stored(0) != 5 || len(cs) != 1 {
		t.Fatalf("after the last chunk: deposited %v, %d bundles stored, %d commitments", deposited(0), stored(0), len(cs))
	}
	for h, r := range deals[0].Roots {
		if !bytes.Equal(cs[0].Roots[h][:], r) {
			t.Fatalf("commitment root %d differs from the deposited one", h)
		}
	}
	if ins := ping(t, e.nc, m[0]); len(ins.Tasks) != 0 {
		t.Fatal("task still owed after the deposit")
	}

	// member 1: the middle chunk never arrives
	deals[1] = m[1].dealing(task(1))
	ch = chunks(t, deals[1])
	if send(t, e, protocol.PDDDepositSubject, m[1].signChunk(t, ch[0]), &rp); rp.Error != "" {
		t.Fatal(rp.Error)
	}
	before := c.Refused()[RefusedMalformed]
	send(t, e, protocol.PDDDepositSubject, m[1].signChunk(t, ch[2]), &rp)
	if !strings.Contains(rp.Error, "missing") || c.Refused()[RefusedMalformed] != before+1 {
		t.Fatalf("a deposit without its middle chunk: %q (malformed refusals %d → %d)", rp.Error, before, c.Refused()[RefusedMalformed])
	}
	if deposited(1) || len(commitsOf(commits(t, e), 1)) != 0 {
		t.Fatal("an incomplete deposit was marked or its commitments written")
	}
	// sent again whole (fresh sequence numbers), it is accepted
	m[1].depositAll(t, e, deals[1])
	if !deposited(1) || len(commitsOf(commits(t, e), 1)) != 1 {
		t.Fatal("the retried deposit was not accepted")
	}

	// malformed chunks: roots before the last chunk, a chunk index out of range
	for _, bad := range []blind.DepositRequest{
		{Chunk: 0, Chunks: 2, Roots: deals[1].Roots},
		{Chunk: 2, Chunks: 2},
		{Chunk: 0, Chunks: blind.MaxChunks + 1},
	} {
		d := deals[1]
		d.Bundles, d.Roots, d.Chunk, d.Chunks = nil, bad.Roots, bad.Chunk, bad.Chunks
		m[1].seq++
		d.Seq = m[1].seq
		s, _ := blind.SignMessage(m[1].sign, blind.PurposeDeposit, d)
		if send(t, e, protocol.PDDDepositSubject, s, &rp); !strings.Contains(rp.Error, "malformed") {
			t.Fatalf("chunk %d of %d with %d roots accepted: %q", d.Chunk, d.Chunks, len(d.Roots), rp.Error)
		}
	}

	// members 2 and 3 deposit; member 4 never does (it drops)
	for i := 2; i < 4; i++ {
		deals[i] = m[i].dealing(task(i))
		m[i].depositAll(t, e, deals[i])
	}

	// no recovery request yet: no bundles
	var br blind.BundlesReply
	ref := c.Refused()
	if send(t, e, protocol.PDDBundlesSubject, m[0].bundlesMsg(tk, 0, 0), &br); br.Error == "" || c.Refused()[RefusedUnknown] != ref[RefusedUnknown]+1 {
		t.Fatalf("bundles served with no recovery request: %q", br.Error)
	}
	req := blind.Request{Instance: in, N: 5, T: blind.Threshold(5), Dropped: []uint16{4}}
	rs, _ := blind.SignMessage(agg, blind.PurposeRecovery, req)
	if send(t, e, protocol.PDDRecoverySubject, rs, &rp); rp.Error != "" {
		t.Fatal(rp.Error)
	}
	// the ping reply names the recovery and carries no bundles
	for i := 0; i < 4; i++ {
		var raw json.RawMessage
		send(t, e, protocol.PDDPingSubject, m[i].pingMsg(), &raw)
		var ins blind.Instructions
		if err := json.Unmarshal(raw, &ins); err != nil || ins.Error != "" || len(ins.Recoveries) != 1 {
			t.Fatalf("member %d: ping %s", i, raw)
		}
		if strings.Contains(string(raw), "bundles") {
			t.Fatalf("the ping reply carries bundles: %.200s", raw)
		}
	}

	// every survivor pages through its bundles: those of dealers 0..3 to it
	for i := 0; i < 4; i++ {
		var got []blind.SealedBundle
		pages := 0
		for off := 0; off >= 0; pages++ {
			msg := m[i].bundlesMsg(tk, i, off)
			var raw json.RawMessage
			send(t, e, protocol.PDDBundlesSubject, msg, &raw)
			if len(raw) > chunkLimit {
				t.Fatalf("a page of %d bytes > limit %d", len(raw), chunkLimit)
			}
			br = blind.BundlesReply{}
			if err := json.Unmarshal(raw, &br); err != nil || br.Error != "" {
				t.Fatalf("member %d, page from %d: %v %s", i, off, err, br.Error)
			}
			if br.Next >= 0 && br.Next <= off {
				t.Fatalf("page from %d continues at %d", off, br.Next)
			}
			got = append(got, br.Bundles...)
			off = br.Next
		}
		var want []blind.SealedBundle
		for f := 0; f < 4; f++ {
			want = append(want, deals[f].Bundles[i])
		}
		if pages < 2 || len(got) != len(want) {
			t.Fatalf("member %d: %d bundles in %d pages, want %d in ≥ 2", i, len(got), pages, len(want))
		}
		for k := range want {
			if got[k].From != want[k].From || got[k].To != want[k].To || !bytes.Equal(got[k].Ciphertext, want[k].Ciphertext) {
				t.Fatalf("member %d: bundle %d is %d→%d, not the deposited %d→%d", i, k, got[k].From, got[k].To, want[k].From, want[k].To)
			}
		}
	}

	// refused: another member's bundles, the dropped member's, a request
	// in another client's name, a replay
	ref = c.Refused()
	replay := m[1].bundlesMsg(tk, 1, 0)
	cases := []struct {
		name, reason string
		msg          blind.Signed
	}{
		{"member 1 asking for member 0's bundles", RefusedNotMember, m[1].bundlesMsg(tk, 0, 0)},
		{"the dropped member", RefusedNotMember, m[4].bundlesMsg(tk, 4, 0)},
		{"signed by another client", RefusedSignature, func() blind.Signed {
			s, _ := blind.SignMessage(m[2].sign, blind.PurposeBundles, blind.BundlesRequest{ClientID: m[0].id, Seq: 1 << 50,
				Campaign: "flu", Round: tk.Round, Group: tk.Group, Member: 0})
			return s
		}()},
		{"a deposit signature", RefusedSignature, func() blind.Signed {
			m[0].seq++
			s, _ := blind.SignMessage(m[0].sign, blind.PurposeDeposit, blind.BundlesRequest{ClientID: m[0].id, Seq: m[0].seq,
				Campaign: "flu", Round: tk.Round, Group: tk.Group, Member: 0})
			return s
		}()},
		{"a replay", RefusedReplay, replay},
	}
	if send(t, e, protocol.PDDBundlesSubject, replay, &br); br.Error != "" {
		t.Fatal(br.Error)
	}
	want := map[string]int64{}
	for _, k := range cases {
		if send(t, e, protocol.PDDBundlesSubject, k.msg, &br); br.Error == "" || len(br.Bundles) != 0 || br.Next != -1 {
			t.Fatalf("%s: served %d bundles (%q)", k.name, len(br.Bundles), br.Error)
		}
		want[k.reason]++
	}
	got := c.Refused()
	for r, n := range want {
		if got[r]-ref[r] != n {
			t.Errorf("refused %s: %d, want %d", r, got[r]-ref[r], n)
		}
	}
}
