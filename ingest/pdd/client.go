// Package pdd is the client side of Private Data Donor mode (Primault et
// al., WWW 2019, §3.2 and §3.4): a client registers a long-term X25519 key
// with the coordinator, contacts it once on each day it is active, and for
// every round it owes builds its keyword-count vector of that day from its
// own log, blinds it for its group (protocol/blind), deposits the recovery
// shares of its pair seeds with the coordinator, and sends the blinded
// vector through the onion relays to Kafka topic "vectors". When asked, it
// answers recovery requests for groups where members dropped.
//
// A client-side blacklist (PDD §6.1) removes keywords the user never shares
// before anything is counted.
package pdd

import (
	"context"
	"crypto/ecdh"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// ErrListMismatch is returned when the coordinator's keyword list is not the
// client's (different length or hash): the vector slots would mean other
// keywords.
var ErrListMismatch = errors.New("pdd: the coordinator's keyword list differs from the client's")

// Client is one PDD client. Counts holds its keyword counts per day (from
// keywords.List.Counts, blacklist already applied). It is not safe for
// concurrent use; many clients may run concurrently.
type Client struct {
	ID       string
	Key      *ecdh.PrivateKey
	Campaign string
	List     *keywords.List
	Counts   map[keywords.Day]keywords.Sparse
	// MaxCount, when > 0, clips each keyword's count of a day to MaxCount
	// before blinding (the sensitivity of the release's Laplace noise).
	MaxCount uint64

	answered map[blind.Instance]bool
	sent     map[blind.Instance]bool
}

// Transport is what a client talks through: the coordinator over NATS and
// the relays (Route + Publish, as ingest.Client uses them).
type Transport struct {
	NC      *nats.Conn
	Route   ingest.Route
	Publish func(ctx context.Context, onion []byte) error
}

// Register creates a client with a fresh key and registers it.
func Register(ctx context.Context, tr *Transport, campaign string, list *keywords.List) (*Client, error) {
	k, err := blind.GenerateKey()
	if err != nil {
		return nil, err
	}
	var rep blind.RegisterReply
	if err := natsconn.RequestJSON(ctx, tr.NC, protocol.PDDRegisterSubject, blind.RegisterRequest{PublicKey: k.PublicKey().Bytes()}, &rep); err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, fmt.Errorf("pdd: register: %s", rep.Error)
	}
	return &Client{ID: rep.ClientID, Key: k, Campaign: campaign, List: list}, nil
}

// DayStats says what one Ping did.
type DayStats struct {
	Submitted, Answered int
}

// Ping is the client's contact of the day: it fetches its instructions,
// submits every owed round and answers every recovery task. Errors: the
// coordinator's, ErrListMismatch, or a relay publish error.
func (c *Client) Ping(ctx context.Context, tr *Transport) (DayStats, error) {
	var st DayStats
	var ins blind.Instructions
	if err := natsconn.RequestJSON(ctx, tr.NC, protocol.PDDPingSubject, blind.PingRequest{ClientID: c.ID, Campaign: c.Campaign}, &ins); err != nil {
		return st, err
	}
	if ins.Error != "" {
		return st, fmt.Errorf("pdd: ping: %s", ins.Error)
	}
	if h := c.List.Hash(); ins.L != c.List.Len() || string(ins.ListHash) != string(h[:]) {
		return st, fmt.Errorf("%w (coordinator: %s, L=%d; client: L=%d): load the campaign's list with --keywords", ErrListMismatch, ins.Keywords, ins.L, c.List.Len())
	}
	if c.sent == nil {
		c.sent, c.answered = map[blind.Instance]bool{}, map[blind.Instance]bool{}
	}
	for _, t := range ins.Tasks {
		in := t.Instance(c.Campaign)
		if c.sent[in] {
			continue
		}
		if err := c.submit(ctx, tr, t); err != nil {
			return st, fmt.Errorf("pdd: submit %s: %w", in, err)
		}
		c.sent[in] = true
		st.Submitted++
	}
	for _, rt := range ins.Recoveries {
		in := rt.Instance(c.Campaign)
		if c.answered[in] {
			continue // one answer per instance, whatever the server asks
		}
		if err := c.answer(ctx, tr, rt); err != nil {
			return st, fmt.Errorf("pdd: recovery %s: %w", in, err)
		}
		c.answered[in] = true
		st.Answered++
	}
	return st, nil
}

func (c *Client) seeds(t blind.Task) ([]blind.Seed, error) {
	if t.Member < 0 || t.Member >= len(t.Members) || string(t.Members[t.Member]) != string(c.Key.PublicKey().Bytes()) {
		return nil, errors.New("the roster does not list this client's key at its member index")
	}
	if t.T != blind.Threshold(len(t.Members)) {
		return nil, fmt.Errorf("threshold %d for a group of %d, want %d", t.T, len(t.Members), blind.Threshold(len(t.Members)))
	}
	return blind.Seeds(c.Key, t.Member, t.Members, t.Instance(c.Campaign))
}

func (c *Client) submit(ctx context.Context, tr *Transport, t blind.Task) error {
	in := t.Instance(c.Campaign)
	seeds, err := c.seeds(t)
	if err != nil {
		return err
	}
	bundles, err := blind.Deposit(in, t.Member, seeds, t.Members, t.T)
	if err != nil {
		return err
	}
	var rep blind.Reply
	if err := natsconn.RequestJSON(ctx, tr.NC, protocol.PDDDepositSubject, blind.DepositRequest{
		Campaign: c.Campaign, Round: t.Round, Group: t.Group, From: uint16(t.Member), Bundles: bundles}, &rep); err != nil {
		return err
	}
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	v := c.Counts[keywords.Day(t.Round)].Dense(c.List.Len())
	if c.MaxCount > 0 {
		for k := range v {
			v[k] = min(v[k], c.MaxCount)
		}
	}
	sub := &blind.Submission{Instance: in, Member: uint16(t.Member), Y: blind.Blind(v, t.Member, seeds)}
	b, _ := sub.MarshalBinary()
	return c.send(ctx, tr, in, b)
}

func (c *Client) send(ctx context.Context, tr *Transport, in blind.Instance, msg []byte) error {
	onion, err := tr.Route.WrapVector([]byte(in.String()), msg)
	if err != nil {
		return err
	}
	return tr.Publish(ctx, onion)
}

func (c *Client) answer(ctx context.Context, tr *Transport, rt blind.RecoveryTask) error {
	in := rt.Instance(c.Campaign)
	seeds, err := c.seeds(rt.Task)
	if err != nil {
		return err
	}
	req := blind.Request{Instance: in, N: len(rt.Members), T: rt.T, Dropped: rt.Dropped}
	if err := req.Check(rt.Member, len(rt.Members)); err != nil {
		return err
	}
	var opened []*blind.Bundle
	for _, sb := range rt.Bundles {
		b, err := blind.OpenBundle(c.Key, in, uint16(rt.Member), sb)
		if err != nil {
			continue // a bundle that does not open is skipped; others' shares suffice
		}
		opened = append(opened, b)
	}
	a, err := blind.MakeAnswer(&req, rt.Member, seeds, opened)
	if err != nil {
		return err
	}
	b, _ := a.MarshalBinary()
	return c.send(ctx, tr, in, b)
}
