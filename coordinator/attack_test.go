package coordinator

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// TestAttackForgedCoordination drives the coordinator as an outsider and
// as a registered client would, over NATS, with messages forged the ways
// the unauthenticated protocol allowed: a clock advance (every open group
// would miss its deadline), a recovery request stored first (the
// aggregator's real one would then be refused) naming a member who did
// submit as dropped, a deposit overwriting another member's bundles, and a
// replayed ping. Each must be refused with its reason counted, and the
// clock, the stored request and the deposits must stay as the honest
// parties made them.
func TestAttackForgedCoordination(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	list, _ := keywords.Parse(stringsReader("flu\nfever\n"))
	_, agg, _ := ed25519.GenerateKey(rand.Reader)
	_, op, _ := ed25519.GenerateKey(rand.Reader)
	_, mallory, _ := ed25519.GenerateKey(rand.Reader)
	c := e.coordinator(t, Campaign{Name: "flu", List: list, GroupSize: 3, Delay: 1})
	c.AggregatorKey, c.OperatorKey = agg.Public().(ed25519.PublicKey), op.Public().(ed25519.PublicKey)
	const day = 13000
	if _, err := c.Advance(ctx, day); err != nil {
		t.Fatal(err)
	}
	var cl []*testClient
	for i := 0; i < 3; i++ {
		cl = append(cl, register(t, e.nc))
		ping(t, e.nc, cl[i])
	}
	if _, err := c.Advance(ctx, day+1); err != nil {
		t.Fatal(err)
	}
	task := map[*testClient]blind.Task{}
	for _, x := range cl {
		task[x] = ping(t, e.nc, x).Tasks[0]
	}
	succeeded := 0
	var lines []string
	try := func(name, subject string, msg any) {
		var rep blind.Reply
		if err := natsconn.RequestJSON(ctx, e.nc, subject, msg, &rep); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rep.Error == "" {
			succeeded++
			lines = append(lines, name+" ACCEPTED")
		} else {
			lines = append(lines, name+" refused")
		}
	}
	// 1. clock advance: unsigned (Mallory's key) and the operator's replayed for an old day
	adv, _ := blind.SignMessage(mallory, blind.PurposeAdvance, blind.AdvanceRequest{Day: day + 30})
	try("clock advance signed by a client", protocol.PDDAdvanceSubject, adv)
	// a ping signature reused as an advance (another purpose) does not verify either
	try("ping signature replayed as an advance", protocol.PDDAdvanceSubject, cl[0].pingMsg())
	if d, _, _ := c.Day(ctx); d != day+1 {
		t.Fatalf("clock moved to %d", d)
	}
	// 2. recovery request naming member 2 (who will submit) as dropped, stored first
	tk := task[cl[0]]
	in := tk.Instance("flu")
	forged := blind.Request{Instance: in, N: 3, T: 2, Dropped: []uint16{2}}
	fr, _ := blind.SignMessage(mallory, blind.PurposeRecovery, forged)
	try("recovery request signed by a client", protocol.PDDRecoverySubject, fr)
	real := blind.Request{Instance: in, N: 3, T: 2}
	rr, _ := blind.SignMessage(agg, blind.PurposeRecovery, real)
	var rep blind.Reply
	if err := natsconn.RequestJSON(ctx, e.nc, protocol.PDDRecoverySubject, rr, &rep); err != nil || rep.Error != "" {
		t.Fatalf("the aggregator's real request was refused: %v %s", err, rep.Error)
	}
	// 3. deposit for another member's index (client 1 writes member of client 0)
	d := cl[1].deposit(tk)
	try("deposit for another member's index", protocol.PDDDepositSubject, d)
	// 3b. a deposit with client 0's id but signed by client 1
	cl[1].seq++
	dr := blind.DepositRequest{ClientID: cl[0].id, Seq: cl[1].seq, Campaign: "flu", Round: tk.Round, Group: tk.Group, From: uint16(tk.Member)}
	for h := 0; h < 3; h++ {
		dr.Roots = append(dr.Roots, make([]byte, 32))
		dr.Bundles = append(dr.Bundles, blind.SealedBundle{From: uint16(tk.Member), To: uint16(h), Ciphertext: make([]byte, 64)})
	}
	ds, _ := blind.SignMessage(cl[1].sign, blind.PurposeDeposit, dr)
	try("deposit in another client's name", protocol.PDDDepositSubject, ds)
	// 4. an honest deposit, then its replay
	good := cl[0].deposit(tk)
	if err := natsconn.RequestJSON(ctx, e.nc, protocol.PDDDepositSubject, good, &rep); err != nil || rep.Error != "" {
		t.Fatalf("honest deposit refused: %v %s", err, rep.Error)
	}
	try("replayed deposit", protocol.PDDDepositSubject, good)
	p := cl[2].pingMsg()
	var ins blind.Instructions
	natsconn.RequestJSON(ctx, e.nc, protocol.PDDPingSubject, p, &ins)
	if ins.Error != "" {
		t.Fatal(ins.Error)
	}
	var ins2 blind.Instructions
	natsconn.RequestJSON(ctx, e.nc, protocol.PDDPingSubject, p, &ins2)
	if ins2.Error == "" {
		succeeded++
		lines = append(lines, "replayed ping ACCEPTED")
	} else {
		lines = append(lines, "replayed ping refused")
	}
	ref := c.Refused()
	fmt.Printf("ATTACK forged-coordination: %d of %d forged or replayed messages accepted (clock advance, recovery request, deposits in another's name, replays); refused by reason %v\n",
		succeeded, len(lines), ref)
	if succeeded != 0 {
		t.Fatalf("forged coordination messages accepted: %v", lines)
	}
	want := map[string]int64{RefusedSignature: 4, RefusedNotMember: 1, RefusedReplay: 2}
	for k, v := range want {
		if ref[k] != v {
			t.Errorf("refused %s: %d, want %d (%v)", k, ref[k], v, ref)
		}
	}
	// positive control: the operator's signed advance moves the clock
	if rep, err := NATSAdvance(ctx, e.nc, op, day+2); err != nil || rep.Day != day+2 {
		t.Fatalf("operator's advance: %+v %v", rep, err)
	}
	// the stored request is the aggregator's
	re, err := c.rounds.Get(ctx, recoveryKey(in))
	if err != nil || string(re.Value()) != mustJSON(real) {
		t.Fatalf("stored recovery request %s, want the aggregator's", re.Value())
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
