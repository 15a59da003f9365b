// Package pdd is the client side of Private Data Donor mode (Primault et
// al., WWW 2019, §3.2 and §3.4): a client registers a long-term X25519 key
// with the coordinator, contacts it once on each day it is active, and for
// every round it owes builds its keyword-count vector of that day from its
// own log, blinds it for its group (protocol/blind), deposits the recovery
// shares of its pair seeds with the coordinator (in chunks of at most
// blind.MaxMessageBytes, blind.SplitDeposit: a deposit is about 44·n² bytes),
// and sends the blinded vector through the onion relays to Kafka topic
// "vectors". When asked, it fetches the bundles addressed to it page by
// page and answers the group's unmasking request (double masking, Bonawitz
// et al. CCS 2017 §4): at most once per group, only for a roster it
// submitted for.
// Every request to the coordinator is signed with its registered Ed25519
// key and carries a growing sequence number.
//
// A client-side blacklist (PDD §6.1) removes keywords the user never shares
// before anything is counted.
package pdd

import (
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/publish"
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
//
// Its state — keys, the deal secret, the last sequence number, the rounds
// it submitted (with the roster it submitted for) and the recovery requests
// it answered — is kept in memory, and in the file StatePath when set
// (written atomically after every change, mode 0600; Open reads it back),
// so a restarted client never answers a second request for one group and
// never signs a replayable sequence number.
type Client struct {
	// ID is the client id the coordinator assigned at registration.
	ID      string
	Key     *ecdh.PrivateKey   // long-term X25519 key: pair seeds, bundles
	SignKey ed25519.PrivateKey // signs every coordination request
	Secret  [32]byte           // keys self-mask seeds and deal randomness (blind.DealSecret)
	// Campaign names the PDD campaign the client registered for.
	Campaign string
	List     *keywords.List
	Counts   map[keywords.Day]keywords.Sparse
	// MaxCount, when > 0, clips each keyword's count of a day to MaxCount
	// before blinding (the sensitivity of the release's Laplace noise).
	MaxCount uint64
	// StatePath, when set, is the file the client's state is kept in.
	StatePath string

	// CoordinatorKey is the coordinator's Ed25519 public key this client
	// pinned (kept in the state file): the first Transport.CoordinatorKey
	// it used. Tasks must be signed by it (blind.VerifyTask); a Transport
	// showing another key is refused with ErrCoordinatorKeyChanged unless
	// Config.Fingerprints vouched for it. nil: not pinned yet.
	CoordinatorKey ed25519.PublicKey

	seq      uint64
	answered map[blind.Instance]bool
	sent     map[blind.Instance][32]byte // instance → hash of the roster submitted for
}

// Transport is what a client talks through: the coordinator over NATS and
// the relays (Route + Publish, as ingest.Client uses them).
type Transport struct {
	// NC is the connection to the coordinator (requests; left open).
	NC *nats.Conn
	// Route holds the relays' and the aggregator's onion public keys
	// (ingest.LoadRoute).
	Route ingest.Route
	// Publish sends an onion to relay A (ingest/publish.Publisher.Publish).
	Publish func(ctx context.Context, onion []byte) error
	// CoordinatorKey is the coordinator operator's Ed25519 public key
	// (coordinator-sign.key.pub; Dial reads it from Config.KeysDir): the
	// client blinds and deals only for rosters signed by it
	// (blind.VerifyTask) and pins it in its state. nil (a Transport built
	// by hand for an in-process simulation): the key the client pinned,
	// or none — then tasks are not verified.
	CoordinatorKey ed25519.PublicKey
	// coordVouched: Config.Fingerprints vouched for CoordinatorKey (a
	// rotation replaces the pinned key)
	coordVouched bool

	// set by Dial: what Close flushes and closes
	pub *publish.Publisher
	own *nats.Conn
}

// Register creates a client with fresh keys and registers it (the request
// is signed by the new signing key, proving possession). With statePath
// set, the state is written there.
func Register(ctx context.Context, tr *Transport, campaign string, list *keywords.List, statePath string) (*Client, error) {
	k, err := blind.GenerateKey()
	if err != nil {
		return nil, err
	}
	spub, spriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	c := &Client{Key: k, SignKey: spriv, Campaign: campaign, List: list, StatePath: statePath, CoordinatorKey: tr.CoordinatorKey}
	if _, err := rand.Read(c.Secret[:]); err != nil {
		return nil, err
	}
	signed, err := blind.SignMessage(spriv, blind.PurposeRegister, blind.RegisterRequest{PublicKey: k.PublicKey().Bytes(), SignKey: spub})
	if err != nil {
		return nil, err
	}
	var rep blind.RegisterReply
	if err := natsconn.RequestJSON(ctx, tr.NC, protocol.PDDRegisterSubject, signed, &rep); err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, fmt.Errorf("pdd: register: %s", rep.Error)
	}
	if err := checkCampaign(rep, campaign, list); err != nil {
		return nil, err
	}
	c.ID = rep.ClientID
	if err := c.save(); err != nil {
		return nil, err
	}
	return c, nil
}

// ErrCampaignMismatch is returned by Register when the coordinator runs
// another campaign than the client's: its pings would be refused.
var ErrCampaignMismatch = errors.New("pdd: the coordinator runs another campaign")

// checkCampaign refuses a registration whose coordinator announced
// another campaign (ErrCampaignMismatch) or keyword list (ErrListMismatch)
// than the client's; an older coordinator that announces neither passes
// (Ping checks the list then).
func checkCampaign(rep blind.RegisterReply, campaign string, list *keywords.List) error {
	if rep.Campaign != "" && rep.Campaign != campaign {
		return fmt.Errorf("%w: campaign %q, the coordinator runs %q: register with campaign %q (the coordinator's --campaign)", ErrCampaignMismatch, campaign, rep.Campaign, rep.Campaign)
	}
	if rep.ListHash != nil {
		if h := list.Hash(); rep.L != list.Len() || string(rep.ListHash) != string(h[:]) {
			return fmt.Errorf("%w (coordinator: %s, L=%d; client: L=%d): load the campaign's list (--keywords, the list argument of Register)", ErrListMismatch, rep.Keywords, rep.L, list.Len())
		}
	}
	return nil
}

// DayStats says what one Ping did: Submitted counts the blinded vectors
// sent (one per task of the coordinator's instructions not sent before),
// Answered the recovery requests answered (one per group instance).
type DayStats struct {
	Submitted, Answered int
	// Refused counts the tasks refused because the pinned coordinator key
	// did not sign them (ErrCoordinatorSignature).
	Refused int
}

func (c *Client) nextSeq() uint64 {
	c.seq = max(c.seq+1, uint64(time.Now().UnixNano()))
	return c.seq
}

// Ping is the client's contact of the day: it fetches its instructions,
// submits every owed round and answers every unmasking request. Errors: the
// coordinator's, ErrListMismatch, a refused request, or a relay publish
// error.
func (c *Client) Ping(ctx context.Context, tr *Transport) (DayStats, error) {
	var st DayStats
	if c.sent == nil {
		c.sent, c.answered = map[blind.Instance][32]byte{}, map[blind.Instance]bool{}
	}
	coord, err := c.coordinatorKey(tr)
	if err != nil {
		return st, err
	}
	signed, err := blind.SignMessage(c.SignKey, blind.PurposePing, blind.PingRequest{ClientID: c.ID, Campaign: c.Campaign, Seq: c.nextSeq()})
	if err != nil {
		return st, err
	}
	if err := c.save(); err != nil {
		return st, err
	}
	var refused []string
	verified := func(t *blind.Task) bool {
		if coord == nil || blind.VerifyTask(coord, c.Campaign, t) == nil {
			return true
		}
		refused = append(refused, t.Instance(c.Campaign).String())
		st.Refused++
		return false
	}
	var ins blind.Instructions
	if err := natsconn.RequestJSON(ctx, tr.NC, protocol.PDDPingSubject, signed, &ins); err != nil {
		return st, err
	}
	if ins.Error != "" {
		return st, fmt.Errorf("pdd: ping: %s", ins.Error)
	}
	if h := c.List.Hash(); ins.L != c.List.Len() || string(ins.ListHash) != string(h[:]) {
		return st, fmt.Errorf("%w (coordinator: %s, L=%d; client: L=%d): set Client.List to the campaign's keyword list (keywords.Load)", ErrListMismatch, ins.Keywords, ins.L, c.List.Len())
	}
	for _, t := range ins.Tasks {
		in := t.Instance(c.Campaign)
		if _, ok := c.sent[in]; ok {
			continue
		}
		if !verified(&t) {
			continue // nothing blinded or dealt for a roster the coordinator did not sign
		}
		if err := c.submit(ctx, tr, t); err != nil {
			return st, fmt.Errorf("pdd: submit %s: %w", in, err)
		}
		st.Submitted++
	}
	for _, rt := range ins.Recoveries {
		in := rt.Instance(c.Campaign)
		if c.answered[in] {
			continue // one answer per instance, whatever the server asks
		}
		if !verified(&rt.Task) {
			continue
		}
		if err := c.answer(ctx, tr, rt); err != nil {
			return st, fmt.Errorf("pdd: recovery %s: %w", in, err)
		}
		st.Answered++
	}
	if len(refused) > 0 {
		return st, fmt.Errorf("%w: %d tasks (%s) refused, nothing sent for them: someone other than the coordinator answers on %s, or the coordinator runs without its --sign-key; compare coordinator-sign.key.pub with its operator's published fingerprint (Config.Fingerprints)",
			ErrCoordinatorSignature, len(refused), strings.Join(refused, ", "), protocol.PDDPingSubject)
	}
	return st, nil
}

// ErrCoordinatorSignature is wrapped by Ping's error when tasks came that
// the pinned coordinator key did not sign (blind.ErrTaskSignature): they
// are refused, and nothing is blinded, dealt or answered for them.
var ErrCoordinatorSignature = errors.New("pdd: tasks not signed by the pinned coordinator key")

// ErrCoordinatorKeyChanged is returned by Ping when the Transport's
// coordinator key differs from the one the client pinned and
// Config.Fingerprints does not vouch for it.
var ErrCoordinatorKeyChanged = errors.New("pdd: the coordinator's signing key changed since this client pinned it")

// coordinatorKey returns the key the client's tasks must verify under:
// the pinned one, pinning tr's on first use (or a vouched rotation).
func (c *Client) coordinatorKey(tr *Transport) (ed25519.PublicKey, error) {
	switch {
	case tr.CoordinatorKey == nil:
		return c.CoordinatorKey, nil
	case c.CoordinatorKey == nil || (tr.coordVouched && !c.CoordinatorKey.Equal(tr.CoordinatorKey)):
		c.CoordinatorKey = tr.CoordinatorKey
		return c.CoordinatorKey, c.save()
	case !c.CoordinatorKey.Equal(tr.CoordinatorKey):
		return nil, fmt.Errorf("%w: pinned %x…, Config.KeysDir's %s is %x…: if the operator rotated it, verify the new file's fingerprint out of band and set Config.Fingerprints[%q]",
			ErrCoordinatorKeyChanged, c.CoordinatorKey[:4], CoordinatorKeyFile, tr.CoordinatorKey[:4], CoordinatorKeyFile)
	}
	return c.CoordinatorKey, nil
}

// rosterHash identifies the roster a task names (its members' keys in
// order, the member index and the threshold).
func rosterHash(t blind.Task) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%d %d %d %d %d\n", t.Round, t.Group, t.Member, t.T, len(t.Members))
	for _, m := range t.Members {
		h.Write(m)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
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
	selfSeed, rnd, err := blind.DealSecret(c.Secret[:], in)
	if err != nil {
		return err
	}
	d, err := blind.Deal(in, t.Member, seeds, selfSeed, t.Members, t.T, rnd)
	if err != nil {
		return err
	}
	roots := make([][]byte, len(d.Commit.Roots))
	for h := range roots {
		roots[h] = d.Commit.Roots[h][:]
	}
	chunks, err := blind.SplitDeposit(blind.DepositRequest{ClientID: c.ID, Roots: roots, Campaign: c.Campaign, Round: t.Round,
		Group: t.Group, From: uint16(t.Member), Bundles: d.Bundles}, maxChunkBytes)
	if err != nil {
		return err
	}
	// a refused last chunk (a chunk lost on the way, so the coordinator
	// misses bundles) is answered by sending the whole deposit once more:
	// the deal is deterministic, so it is byte-identical
	for attempt := 0; ; attempt++ {
		last, err := c.deposit(ctx, tr, chunks)
		if err == nil {
			break
		}
		if !last || attempt > 0 {
			return err
		}
	}
	v := c.Counts[keywords.Day(t.Round)].Dense(c.List.Len())
	if c.MaxCount > 0 {
		for k := range v {
			v[k] = min(v[k], c.MaxCount)
		}
	}
	sub := &blind.Submission{Instance: in, Member: uint16(t.Member), Y: blind.Blind(v, t.Member, seeds, selfSeed)}
	b, _ := sub.MarshalBinary()
	if err := c.send(ctx, tr, in, b); err != nil {
		return err
	}
	c.sent[in] = rosterHash(t)
	return c.save()
}

// maxChunkBytes bounds the JSON of one deposit chunk
// (blind.MaxMessageBytes; tests lower it).
var maxChunkBytes = blind.MaxMessageBytes

// deposit sends the chunks of a deposit in order, each signed with its own
// sequence number (saved before it is sent). Errors: a transport error or
// the coordinator's refusal; last says the refusal was of the last chunk.
func (c *Client) deposit(ctx context.Context, tr *Transport, chunks []blind.DepositRequest) (last bool, err error) {
	for _, ch := range chunks {
		ch.Seq = c.nextSeq()
		signed, err := blind.SignMessage(c.SignKey, blind.PurposeDeposit, ch)
		if err != nil {
			return false, err
		}
		if err := c.save(); err != nil {
			return false, err
		}
		var rep blind.Reply
		if err := natsconn.RequestJSON(ctx, tr.NC, protocol.PDDDepositSubject, signed, &rep); err != nil {
			return false, fmt.Errorf("deposit chunk %d of %d: %w", ch.Chunk+1, ch.Chunks, err)
		}
		if rep.Error != "" {
			return ch.Last(), fmt.Errorf("deposit chunk %d of %d: %s", ch.Chunk+1, ch.Chunks, rep.Error)
		}
	}
	return false, nil
}

// bundles fetches, page by page, the sealed bundles the coordinator holds
// for this client as member rt.Member of rt's instance (each page a signed
// blind.BundlesRequest with its own sequence number). Errors: a transport
// error, the coordinator's refusal, or a page that does not move forward.
func (c *Client) bundles(ctx context.Context, tr *Transport, rt blind.RecoveryTask) ([]blind.SealedBundle, error) {
	var out []blind.SealedBundle
	for offset := 0; offset >= 0; {
		signed, err := blind.SignMessage(c.SignKey, blind.PurposeBundles, blind.BundlesRequest{ClientID: c.ID, Seq: c.nextSeq(),
			Campaign: c.Campaign, Round: rt.Round, Group: rt.Group, Member: rt.Member, Offset: offset})
		if err != nil {
			return nil, err
		}
		if err := c.save(); err != nil {
			return nil, err
		}
		var rep blind.BundlesReply
		if err := natsconn.RequestJSON(ctx, tr.NC, protocol.PDDBundlesSubject, signed, &rep); err != nil {
			return nil, fmt.Errorf("bundles from %d: %w", offset, err)
		}
		if rep.Error != "" {
			return nil, fmt.Errorf("bundles from %d: %s", offset, rep.Error)
		}
		if rep.Next >= 0 && rep.Next <= offset {
			return nil, fmt.Errorf("bundles from %d: the next page starts at %d", offset, rep.Next)
		}
		out = append(out, rep.Bundles...)
		offset = rep.Next
	}
	return out, nil
}

func (c *Client) send(ctx context.Context, tr *Transport, in blind.Instance, msg []byte) error {
	onion, err := tr.Route.WrapVector([]byte(in.String()), msg)
	if err != nil {
		return err
	}
	return tr.Publish(ctx, onion)
}

// ErrRequestRefused is wrapped when a client refuses an unmasking request
// that does not match what it submitted for.
var ErrRequestRefused = errors.New("pdd: unmasking request refused")

// answer checks an unmasking request against the roster the client
// submitted for (same members and keys, same index and threshold) and
// blind.Request.Check (a survivor, ≥ t survivors), fetches the bundles
// addressed to it (every page), records that it answered (before sending:
// a crash never leads to a second answer), and sends its revealed shares
// through the relays, in as many messages as the onion size classes need
// (splitAnswer).
func (c *Client) answer(ctx context.Context, tr *Transport, rt blind.RecoveryTask) error {
	in := rt.Instance(c.Campaign)
	h, ok := c.sent[in]
	if !ok {
		return fmt.Errorf("%w: it names this client a survivor of %s, but the client never submitted there", ErrRequestRefused, in)
	}
	if h != rosterHash(rt.Task) {
		return fmt.Errorf("%w: the roster of %s differs from the one the client submitted for", ErrRequestRefused, in)
	}
	req := blind.Request{Instance: in, N: len(rt.Members), T: rt.T, Dropped: rt.Dropped}
	if err := req.Check(rt.Member, len(rt.Members)); err != nil {
		return err
	}
	sealed, err := c.bundles(ctx, tr, rt)
	if err != nil {
		return err
	}
	var opened []*blind.Bundle
	for _, sb := range sealed {
		b, err := blind.OpenBundle(c.Key, in, uint16(rt.Member), sb)
		if err != nil {
			continue // a bundle that does not open is skipped; others' shares suffice
		}
		opened = append(opened, b)
	}
	a, err := blind.MakeAnswer(&req, rt.Member, opened)
	if err != nil {
		return err
	}
	c.answered[in] = true
	if err := c.save(); err != nil {
		return err
	}
	for _, part := range splitAnswer(a, maxAnswerBytes) {
		b, err := part.MarshalBinary()
		if err != nil {
			return err
		}
		if err := c.send(ctx, tr, in, b); err != nil {
			return err
		}
	}
	return nil
}

// maxAnswerBytes bounds one recovery answer message: the largest onion
// size class (128 KiB) less 1 KiB for the answer's header and the
// innermost layer's overhead. An answer reveals |S|·(1+|D|) shares of about
// 49 + 32·⌈log2 n⌉ bytes each (305 bytes at n = 200), so in a large group
// with dropped members it takes several messages.
var maxAnswerBytes = 128<<10 - 1<<10

// splitAnswer splits a into answers of the same instance and member whose
// encodings stay within maxBytes each, the reveals in order (at least one
// answer, and one reveal per answer even when it alone is larger). The
// aggregator's blind.Recovery.Add takes a holder's answer in parts: each
// adds the shares not yet held.
func splitAnswer(a *blind.Answer, maxBytes int) []*blind.Answer {
	const head = 2 + 1 + 64 + 8 + 2 + 4 // version, kind, instance, member, count
	var out []*blind.Answer
	cur := &blind.Answer{Instance: a.Instance, Member: a.Member}
	size := head
	for _, rv := range a.Reveals {
		s := 2 + 2 + 2 + 24 + blind.NonceSize + 2 + 1 + 32*len(rv.Proof)
		if len(cur.Reveals) > 0 && size+s > maxBytes {
			out = append(out, cur)
			cur = &blind.Answer{Instance: a.Instance, Member: a.Member}
			size = head
		}
		cur.Reveals = append(cur.Reveals, rv)
		size += s
	}
	return append(out, cur)
}

// state is the client's file format (JSON).
type state struct {
	ID       string            `json:"id"`
	Campaign string            `json:"campaign"`
	Key      []byte            `json:"x25519"`
	SignSeed []byte            `json:"ed25519_seed"`
	Secret   []byte            `json:"secret"`
	Seq      uint64            `json:"seq"`
	Sent     map[string][]byte `json:"sent"`
	Answered []string          `json:"answered"`
	// Coordinator is the pinned coordinator public key (Ed25519, 32
	// bytes); absent before the first verified contact.
	Coordinator []byte `json:"coordinator_key,omitempty"`
}

func instKey(in blind.Instance) string { return fmt.Sprintf("%d/%d", in.Round, in.Group) }

func (c *Client) save() error {
	if c.StatePath == "" {
		return nil
	}
	st := state{ID: c.ID, Campaign: c.Campaign, Key: c.Key.Bytes(), SignSeed: c.SignKey.Seed(), Secret: c.Secret[:], Seq: c.seq,
		Sent: map[string][]byte{}, Coordinator: c.CoordinatorKey}
	for in, h := range c.sent {
		st.Sent[instKey(in)] = h[:]
	}
	for in := range c.answered {
		st.Answered = append(st.Answered, instKey(in))
	}
	slices.Sort(st.Answered)
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(c.StatePath, b, 0o600); err != nil {
		return fmt.Errorf("pdd: client state %s: %w", c.StatePath, err)
	}
	return nil
}

// Open reads a client's state written by a client with StatePath set
// (Register then Ping). Errors name the file and what is wrong in it.
func Open(path string, list *keywords.List) (*Client, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pdd: client state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("pdd: client state %s: %w", path, err)
	}
	k, err := ecdh.X25519().NewPrivateKey(st.Key)
	if err != nil || len(st.SignSeed) != ed25519.SeedSize || len(st.Secret) != 32 {
		return nil, fmt.Errorf("pdd: client state %s: bad keys", path)
	}
	c := &Client{ID: st.ID, Key: k, SignKey: ed25519.NewKeyFromSeed(st.SignSeed), Campaign: st.Campaign, List: list,
		StatePath: path, seq: st.Seq, sent: map[blind.Instance][32]byte{}, answered: map[blind.Instance]bool{}}
	copy(c.Secret[:], st.Secret)
	if st.Coordinator != nil {
		if len(st.Coordinator) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("pdd: client state %s: bad coordinator key", path)
		}
		c.CoordinatorKey = ed25519.PublicKey(st.Coordinator)
	}
	parse := func(s string) (blind.Instance, error) {
		in := blind.Instance{Campaign: st.Campaign}
		_, err := fmt.Sscanf(s, "%d/%d", &in.Round, &in.Group)
		return in, err
	}
	for s, h := range st.Sent {
		in, err := parse(s)
		if err != nil || len(h) != 32 {
			return nil, fmt.Errorf("pdd: client state %s: sent entry %q", path, s)
		}
		c.sent[in] = [32]byte(h)
	}
	for _, s := range st.Answered {
		in, err := parse(s)
		if err != nil {
			return nil, fmt.Errorf("pdd: client state %s: answered entry %q", path, s)
		}
		c.answered[in] = true
	}
	return c, nil
}
