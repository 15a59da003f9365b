// Package ingest is crowdlog's client side: it mines a user's artifacts,
// obtains OPRF randomness for them, seals one report per artifact instance
// (STAR, Davidson et al., CCS 2022, §4), wraps each in three onion layers (RFC 9180) and
// publishes it to the first relay.
//
// Device is the embeddable client: New, Submit, Close, with its state on
// disk (a user secret per epoch, pinned keys, what it sent), so a restart
// adds no second share. Client is the stateless sealer a Device sends
// through, one per application. Replay drives many devices from one AOL
// log, one per AnonID.
//
// With tokens (Config.Tokens, Replay.Tokens) a device pays the
// issuer's anonymous credentials (Privacy Pass, RFC 9576/9578): one
// randomness token per OPRF element, one report token bound to each
// report, and under FT_u one ARC credential per epoch
// (draft-ietf-privacypass-arc-crypto) whose presentation per artifact
// gives the share's x, so FT_u counts identities, not secrets.
package ingest

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// Route is the onion route [relay A, relay B, aggregator]: the public keys of
// each hop and the NATS subject of relay B (relay A's subject is the
// publisher's).
type Route struct {
	// RelayA, RelayB and Aggregator are the hops' onion public keys (HPKE
	// X25519 with their key ids, keydir.LoadRoute reads them from
	// relay-a.key.pub, relay-b.key.pub and aggregator.key.pub).
	RelayA, RelayB, Aggregator onion.PublicKey
	// SubjectB is relay B's NATS subject, protocol.RelaySubject("b").
	SubjectB string
}

// Wrap builds the three onion layers around an encoded report: the innermost
// for the aggregator (so no relay reads tag or share), relay B's with the
// Kafka key onion.ReportKey(tag) (one of 256 tag buckets: what partitioning
// by tag needs and no more), relay A's naming relay B's subject.
func (rt *Route) Wrap(r *star.Report) ([]byte, error) {
	b, err := r.MarshalBinary()
	if err != nil {
		return nil, err
	}
	l3, err := onion.SealLayer(rt.Aggregator, onion.Hop{Kind: onion.HopDeliver}, b)
	if err != nil {
		return nil, err
	}
	l2, err := onion.SealLayer(rt.RelayB, onion.Hop{Kind: onion.HopKafka, Key: onion.ReportKey(r.Tag)}, l3)
	if err != nil {
		return nil, err
	}
	return onion.SealLayer(rt.RelayA, onion.Hop{Kind: onion.HopRelay, Subject: rt.SubjectB}, l2)
}

// WrapVector builds the onion layers around a PDD message (a blinded vector
// or a recovery answer, protocol/blind): the innermost for the aggregator,
// relay B's producing to Kafka topic "vectors" with key (the group,
// blind.Instance.String()), relay A's naming relay B's subject.
func (rt *Route) WrapVector(key, msg []byte) ([]byte, error) {
	l3, err := onion.SealLayer(rt.Aggregator, onion.Hop{Kind: onion.HopDeliver}, msg)
	if err != nil {
		return nil, err
	}
	l2, err := onion.SealLayer(rt.RelayB, onion.Hop{Kind: onion.HopKafkaVectors, Key: key}, l3)
	if err != nil {
		return nil, err
	}
	return onion.SealLayer(rt.RelayA, onion.Hop{Kind: onion.HopRelay, Subject: rt.SubjectB}, l2)
}

// WrapPrio3 builds the two onion layers around a Prio3 upload (the bytes
// protocol/prio3's VDAF.Shard returns, already HPKE-sealed to the leader,
// so rt.Aggregator is not used): relay B's producing it as it is to Kafka
// topic "prio3-uploads" (protocol.Prio3UploadsTopic) with message key
// campaign, relay A's naming relay B's subject. An upload of L = 10,000
// keywords at b = 4 (655,204 B with both tokens) lands in the 786,432 B size class.
// Errors: a campaign name over 255 bytes, an upload over the largest size
// class, or a key that does not seal.
func (rt *Route) WrapPrio3(campaign string, upload []byte) ([]byte, error) {
	l2, err := onion.SealLayer(rt.RelayB, onion.Hop{Kind: onion.HopKafkaPrio3, Key: []byte(campaign)}, upload)
	if err != nil {
		return nil, fmt.Errorf("prio3 upload for relay b: %w", err)
	}
	return onion.SealLayer(rt.RelayA, onion.Hop{Kind: onion.HopRelay, Subject: rt.SubjectB}, l2)
}

// Randomness evaluates OPRF inputs of an epoch into ω values, in order
// (satisfied by *oprfclient.Client). Implementations verify the service's
// VOPRF proof against the epoch's pinned public key (RFC 9497 §3.3.2) and
// fail — never return unverified ω — when it does not hold.
type Randomness interface {
	// Evaluate returns one verified 64-byte ω per input, in order, for
	// epoch; an error when the service refuses or a proof fails.
	Evaluate(ctx context.Context, epoch string, inputs [][]byte) ([][]byte, error)
}

// Client seals and sends the artifacts of one application under one policy:
// the stateless sealer under a Device (which keeps the user secret and what
// was sent). It is safe for concurrent use: each call handles one user, whose
// secret the caller keeps.
type Client struct {
	// App mines the artifacts (apps.Lookup; its name enters the sealing
	// context).
	App apps.App
	// Epoch, Policy and K are the sealing context: the epoch opened by the
	// operator, the threshold policy (star.FTu or star.FTa) and its Shamir
	// threshold k, as the release uses them.
	Epoch  string
	Policy star.Policy
	K      int
	// Pipeline is the digest of the pipeline definition the reports are
	// sealed for (star.Context.Pipeline; pipelines/pipeline.Digest): it
	// enters the sealing derivation and travels in every report, so the
	// aggregator and the release stage refuse reports of another
	// definition. Zero: none (library use).
	Pipeline [32]byte
	// Randomness evaluates ω for each artifact (an *oprfclient.Client).
	Randomness Randomness
	// Route is the onion route reports are wrapped for.
	Route Route
	// Publish sends one onion to relay A; it blocks when relays fall behind
	// (backpressure) and must not drop.
	Publish func(ctx context.Context, onion []byte) error
	// Limit, when > 0, keeps only the user's Limit most recent artifacts of
	// the epoch after mining (DP_a/DP_u/ZEALOUS, CrowdLogging §3.2.3 and
	// §4: "the most recent d artifacts"; see release/policy Limit).
	// LimitDistinct makes it the Limit most recent distinct artifacts, one
	// report each (DP_u, ZEALOUS); otherwise the Limit most recent artifact
	// instances (DP_a).
	Limit         int
	LimitDistinct bool
	// Window, when > 0, makes the limit dp-su's (release/policy Window):
	// the Limit distinct artifacts kept are the most frequent — most
	// instances among the epoch's artifacts — of the user's Window most
	// recent distinct artifacts, ties to the more recent (LimitFrequent).
	Window int
	// Pad, with Limit > 0, makes Send publish exactly Limit reports per
	// user (dp-gsu, release/policy Padded): the artifacts the limit keeps
	// plus Limit − len(kept) dummy artifacts (DummyArtifacts), sealed,
	// tokened, wrapped and spread exactly like real ones, so the number and
	// sizes of one user's onions do not reveal how much it searched. A
	// dummy is a fresh random artifact that no other user sends: below a
	// Shamir threshold ≥ 2 it is never decrypted, and to the aggregator it
	// is one more singleton artifact. A Device pads in its first Submit of
	// the epoch: the m reports are then spent, and later Submits of that
	// epoch send nothing.
	Pad bool
	// NoOriginal seals "" as every report's original form (the artifact's
	// Secondary): the release publishes the normalized item only (every DP
	// policy, release/policy Kind.IsDP; docs/policies.md), so the original
	// spelling never needs to leave the device, and the aggregator and the
	// readers of the decrypted topic never see it.
	NoOriginal bool
	// Spread is the window over which one user's reports are sent: each
	// report leaves at its own uniformly random offset in [0, Spread) from
	// the end of sealing, in a random order, so an observer of relay a's
	// inbox does not see one user's artifacts as one burst. 0 sends them
	// back to back (still in a random order): log replays and tests.
	Spread time.Duration
	// RandomnessWith, when set, builds the Randomness of one user whose
	// OPRF elements spend that user's randomness tokens (e.g. an
	// oprfclient.Client with Tokens set): how a Replay with tokens gives
	// each replayed user its own token source. nil: the user's
	// elements go through Randomness, without randomness tokens (a service
	// with RequireTokens refuses them).
	RandomnessWith func(tokens oprfclient.TokenSource) Randomness
}

// Issuer is the client of the issuer role (satisfied by
// *tokenclient.Client), signing its requests with one user's identity
// key: Tokens returns one Privacy Pass token (RFC 9578 §5) of kind per
// nonce, in order; Credential returns the identity's ARC credential of
// epoch (draft-ietf-privacypass-arc-crypto), issued once per identity and
// epoch. Errors wrap tokenclient.ErrBudget when the identity's budget of
// the epoch is spent, or tokenclient.ErrNotEnrolled.
type Issuer interface {
	Tokens(ctx context.Context, kind token.Kind, epoch string, nonces [][32]byte) ([]*token.Token, error)
	Credential(ctx context.Context, epoch string) (*arc.Credential, error)
}

// IssuerTokens is the oprfclient.TokenSource of one identity: n
// randomness tokens of epoch from Issuer, on fresh random nonces.
type IssuerTokens struct{ Issuer Issuer }

// RandomnessTokens returns n randomness tokens of epoch (one issuer round
// trip); errors are the issuer's (ErrBudget when the identity's N of the
// epoch is spent).
func (s IssuerTokens) RandomnessTokens(ctx context.Context, epoch string, n int) ([]*token.Token, error) {
	nonces := make([][32]byte, n)
	for i := range nonces {
		if _, err := cryptorand.Read(nonces[i][:]); err != nil {
			return nil, err
		}
	}
	toks, err := s.Issuer.Tokens(ctx, token.KindRandomness, epoch, nonces)
	if err != nil {
		return nil, fmt.Errorf("ingest: randomness tokens: %w", err)
	}
	return toks, nil
}

// user is one user's side of a seal: the user secret of the epoch and,
// with tokens on, its identity's access to the issuer.
type user struct {
	secret *star.UserSecret
	id     *identity // nil: tokens off
}

// identity is one user's access to the issuer: report tokens,
// the Randomness that spends its randomness tokens, and its ARC
// credential of the epoch (FT_u), kept in the device's state.
type identity struct {
	issuer Issuer
	rnd    Randomness // nil: the Client's (RandomnessWith or Randomness)
	st     store
	epoch  string

	mu   sync.Mutex
	cred *arc.Credential
}

// newIdentity is the identity of one user of c with issuer iss and state
// st: its Randomness is c.RandomnessWith(IssuerTokens{iss}) when set.
func newIdentity(c *Client, iss Issuer, st store) *identity {
	id := &identity{issuer: iss, st: st, epoch: c.Epoch}
	if c.RandomnessWith != nil {
		id.rnd = c.RandomnessWith(IssuerTokens{iss})
	}
	return id
}

// credential returns the identity's ARC credential of the epoch: the one
// in the state, or a new one from the issuer, stored (0600, fsync'd)
// before it is used. The issuer issues one per identity and epoch, so a
// lost credential cannot be replaced within the epoch.
func (id *identity) credential(ctx context.Context) (*arc.Credential, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.cred != nil {
		return id.cred, nil
	}
	b, err := id.st.credential(id.epoch)
	if err != nil {
		return nil, err
	}
	if b != nil {
		c, err := arc.ParseCredential(b)
		if err != nil {
			return nil, fmt.Errorf("device state: the ARC credential of epoch %s is damaged (%w): the issuer gives one per identity and epoch, so this device sends FT_u reports again in the next epoch", id.epoch, err)
		}
		id.cred = c
		return c, nil
	}
	c, err := id.issuer.Credential(ctx, id.epoch)
	if err != nil {
		return nil, fmt.Errorf("ingest: ARC credential of epoch %s: %w", id.epoch, err)
	}
	if b, err = c.MarshalBinary(); err != nil {
		return nil, err
	}
	if err := id.st.setCredential(id.epoch, b); err != nil {
		return nil, err
	}
	id.cred = c
	return c, nil
}

// LimitArtifacts applies the client-side limit to arts (in log order, as
// apps.App.Mine returns them): "most recent" is by Artifact.Time, ties
// broken by log order (later = more recent). distinct=false keeps the n most
// recent instances; distinct=true keeps, for the n most recently used
// distinct Primary values, one instance each (its most recent). The result
// is in time order. n ≤ 0 returns arts unchanged.
func LimitArtifacts(arts []apps.Artifact, n int, distinct bool) []apps.Artifact {
	if n <= 0 || (len(arts) <= n && !distinct) {
		return arts
	}
	keep := limitIndex(arts, n, distinct)
	out := make([]apps.Artifact, len(keep))
	for i, j := range keep {
		out[i] = arts[j]
	}
	return out
}

// LimitFrequent applies dp-su's client-side limit (release/policy Window)
// to arts (in log order, as apps.App.Mine returns them): among the window
// most recently used distinct Primary values (recency as LimitArtifacts),
// it keeps the n with the most instances in arts, ties to the more recently
// used, one instance each (its most recent). Frequency is the user's own:
// no other user's data is read, so the choice leaves each user's
// contribution at n distinct artifacts (docs/policies.md). The result is
// in time order; n ≤ 0 or window ≤ 0 keeps nothing.
func LimitFrequent(arts []apps.Artifact, n, window int) []apps.Artifact {
	keep := frequentIndex(arts, n, window)
	out := make([]apps.Artifact, len(keep))
	for i, j := range keep {
		out[i] = arts[j]
	}
	return out
}

// DefaultDummyLength is the length in bytes of a dummy artifact's Primary
// when the user has no artifact to take a length from.
const DefaultDummyLength = 20

// DummyArtifacts returns n padding artifacts for a user whose kept
// artifacts are kept: each Primary (and Secondary, the same string) is
// fresh crypto-random lowercase letters — 26^len values, so no two users
// send the same one and it never reaches a Shamir threshold ≥ 2 — as long
// as the Primary of a kept artifact drawn at random (DefaultDummyLength
// when kept is empty), so that the lengths the aggregator sees after
// peeling follow the users' own artifact lengths. Time is the zero time.
func DummyArtifacts(kept []apps.Artifact, n int) []apps.Artifact {
	out := make([]apps.Artifact, n)
	for i := range out {
		l := DefaultDummyLength
		if len(kept) > 0 {
			l = len(kept[cryptoUint64()%uint64(len(kept))].Primary)
		}
		b := make([]byte, max(l, 16)) // ≥ 16 letters: 26^16 ≈ 2^75 values
		for j := range b {
			b[j] = 'a' + byte(cryptoUint64()%26)
		}
		out[i] = apps.Artifact{Primary: string(b), Secondary: string(b)}
	}
	return out
}

// frequentIndex is LimitFrequent as indices into arts, in time order.
func frequentIndex(arts []apps.Artifact, n, window int) []int {
	if n <= 0 || window <= 0 {
		return nil
	}
	freq := map[string]int{}
	for _, a := range arts {
		freq[a.Primary]++
	}
	cand := limitIndex(arts, window, true) // time order: last = most recent
	if len(cand) > n {
		rank := make([]int, len(cand)) // most recent first
		for i := range cand {
			rank[i] = cand[len(cand)-1-i]
		}
		sort.SliceStable(rank, func(a, b int) bool { return freq[arts[rank[a]].Primary] > freq[arts[rank[b]].Primary] })
		top := map[int]bool{}
		for _, j := range rank[:n] {
			top[j] = true
		}
		kept := cand[:0]
		for _, j := range cand {
			if top[j] {
				kept = append(kept, j)
			}
		}
		cand = kept
	}
	return cand
}

// limitIndex is LimitArtifacts as indices into arts, in time order; n ≤ 0
// keeps nothing.
func limitIndex(arts []apps.Artifact, n int, distinct bool) []int {
	idx := make([]int, len(arts))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return arts[idx[a]].Time.Before(arts[idx[b]].Time) })
	var keep []int
	seen := map[string]bool{}
	for j := len(idx) - 1; j >= 0 && len(keep) < n; j-- {
		a := arts[idx[j]]
		if distinct {
			if seen[a.Primary] {
				continue
			}
			seen[a.Primary] = true
		}
		keep = append(keep, idx[j])
	}
	for i, j := 0, len(keep)-1; i < j; i, j = i+1, j-1 {
		keep[i], keep[j] = keep[j], keep[i]
	}
	return keep
}

// SubmitUser mines one user's records and sends the artifacts (Send). It
// returns the number of reports published.
func (c *Client) SubmitUser(ctx context.Context, secret *star.UserSecret, records []aol.Record) (int, error) {
	return c.Send(ctx, secret, c.App.Mine(records))
}

// Send seals and publishes one user's artifacts of the epoch, as
// apps.App.Mine returns them: it applies Limit, fetches ω for each
// distinct artifact (one batched OPRF round trip per 1,024 artifacts), and
// publishes one report per artifact instance. It returns the number of
// reports published. A randomness error (failed proof, changed epoch key,
// closed epoch) stops the user before anything is sealed. Send keeps no
// state: two calls with the same artifacts send them twice (Device
// remembers what it sent).
func (c *Client) Send(ctx context.Context, secret *star.UserSecret, arts []apps.Artifact) (int, error) {
	if c.Window > 0 {
		arts = LimitFrequent(arts, c.Limit, c.Window)
	} else {
		arts = LimitArtifacts(arts, c.Limit, c.LimitDistinct)
	}
	if c.Pad && c.Limit > len(arts) {
		arts = append(arts, DummyArtifacts(arts, c.Limit-len(arts))...)
	}
	onions, err := c.seal(ctx, &user{secret: secret}, arts)
	if err != nil {
		return 0, err
	}
	return c.send(ctx, onions)
}

// seal returns one onion per artifact of arts (no limit applied): ω for
// each distinct artifact, one report each instance, three layers.
//
// With tokens on (u.id set) ω spends the user's randomness
// tokens (one per distinct artifact); under FT_u each distinct artifact
// gets one ARC presentation of the user's credential with context
// Sealing.ARCContext() and limit 1, its tag giving the share's x and the
// unit id (star.Sealing.SealARC), shared by the artifact's repeated
// instances; and every report gets one report token bound to it (nonce =
// token.ReportNonce of its encoding without the token), all of them in one
// issuer round trip, before any onion is wrapped.
func (c *Client) seal(ctx context.Context, u *user, arts []apps.Artifact) ([][]byte, error) {
	if len(arts) == 0 {
		return nil, nil
	}
	index := map[string]int{}
	var inputs [][]byte
	for _, a := range arts {
		if _, ok := index[a.Primary]; !ok {
			index[a.Primary] = len(inputs)
			inputs = append(inputs, oprf.OPRFInput(c.App.Name(), c.Epoch, a.Primary))
		}
	}
	// the credential first: a refusal spends no randomness tokens
	var cred *arc.Credential
	if u.id != nil && c.Policy == star.FTu {
		var err error
		if cred, err = u.id.credential(ctx); err != nil {
			return nil, err
		}
	}
	rnd := c.Randomness
	if u.id != nil && u.id.rnd != nil {
		rnd = u.id.rnd
	}
	omegas, err := rnd.Evaluate(ctx, c.Epoch, inputs)
	if err != nil {
		return nil, err
	}
	if len(omegas) != len(inputs) {
		return nil, fmt.Errorf("randomness: %d outputs for %d inputs", len(omegas), len(inputs))
	}
	sealings := make([]*star.Sealing, len(inputs))
	var arcTags, presentations [][]byte
	if cred != nil {
		arcTags, presentations = make([][]byte, len(inputs)), make([][]byte, len(inputs))
	}
	reports := make([]*star.Report, 0, len(arts))
	meaning := apps.Meaning(c.App)
	for _, a := range arts {
		i := index[a.Primary]
		if sealings[i] == nil {
			s, err := star.DeriveSealingIn(omegas[i], star.Context{App: c.App.Name(), Meaning: meaning, Epoch: c.Epoch, Policy: c.Policy, K: c.K, Pipeline: c.Pipeline})
			if err != nil {
				return nil, err
			}
			sealings[i] = &s
			if cred != nil {
				// one presentation per artifact: limit 1, nonce 0, so its
				// tag is the same on every device restart
				if err := present(cred, &s, &presentations[i], &arcTags[i]); err != nil {
					return nil, err
				}
			}
		}
		var r *star.Report
		if c.NoOriginal {
			a.Secondary = ""
		}
		if cred != nil {
			r, err = sealings[i].SealARC(arcTags[i], a.Primary, a.Secondary)
			if r != nil {
				r.Presentation = presentations[i]
			}
		} else {
			r, err = sealings[i].Seal(u.secret, a.Primary, a.Secondary)
		}
		if err != nil {
			return nil, fmt.Errorf("seal: %w", err)
		}
		reports = append(reports, r)
	}
	if u.id != nil {
		if err := c.reportTokens(ctx, u.id.issuer, reports); err != nil {
			return nil, err
		}
	}
	onions := make([][]byte, 0, len(reports))
	for _, r := range reports {
		onion, err := c.Route.Wrap(r)
		if err != nil {
			return nil, fmt.Errorf("onion: %w", err)
		}
		onions = append(onions, onion)
	}
	return onions, nil
}

// present makes cred's presentation for s's artifact (context
// s.ARCContext(), nonce 0, limit 1) and stores its encoding and tag.
func present(cred *arc.Credential, s *star.Sealing, enc, tag *[]byte) error {
	p, err := cred.Present(cryptorand.Reader, s.ARCContext(), 0, 1)
	if err != nil {
		return fmt.Errorf("ARC presentation: %w", err)
	}
	if *enc, err = p.MarshalBinary(); err != nil {
		return err
	}
	*tag = p.Tag()
	return nil
}

// reportTokens sets each report's Token: one report token per report from
// iss, bound to the report by its nonce (token.ReportNonce of the
// report's encoding without the token), in one batched request.
func (c *Client) reportTokens(ctx context.Context, iss Issuer, reports []*star.Report) error {
	nonces := make([][32]byte, len(reports))
	for i, r := range reports {
		b, err := r.UnsignedBytes()
		if err != nil {
			return err
		}
		nonces[i] = token.ReportNonce(b)
	}
	toks, err := iss.Tokens(ctx, token.KindReport, c.Epoch, nonces)
	if err != nil {
		return fmt.Errorf("ingest: report tokens: %w", err)
	}
	if len(toks) != len(reports) {
		return fmt.Errorf("ingest: the issuer returned %d report tokens for %d reports", len(toks), len(reports))
	}
	for i, t := range toks {
		b, err := t.MarshalBinary()
		if err != nil {
			return err
		}
		reports[i].Token = b
	}
	return nil
}

// send publishes onions in a random order, each at a uniformly random
// offset in [0, Spread) from now (sorted, so it sleeps at most Spread in
// all); it returns how many were published and stops at the first publish
// error or when ctx ends.
func (c *Client) send(ctx context.Context, onions [][]byte) (int, error) {
	perm := cryptoPerm(len(onions))
	var offsets []time.Duration
	if c.Spread > 0 {
		offsets = make([]time.Duration, len(onions))
		for i := range offsets {
			offsets[i] = time.Duration(cryptoUint64() % uint64(c.Spread))
		}
		sort.Slice(offsets, func(a, b int) bool { return offsets[a] < offsets[b] })
	}
	start := time.Now()
	n := 0
	for i, j := range perm {
		if offsets != nil {
			if d := time.Until(start.Add(offsets[i])); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return n, fmt.Errorf("ingest: stopped while spreading reports (%d of %d sent): %w", n, len(onions), ctx.Err())
				case <-t.C:
				}
			}
		}
		if err := c.Publish(ctx, onions[j]); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// cryptoUint64 is a uniform 64-bit value from crypto/rand.
func cryptoUint64() uint64 {
	var b [8]byte
	if _, err := cryptorand.Read(b[:]); err != nil {
		panic(err) // crypto/rand.Read does not fail on supported platforms
	}
	return binary.BigEndian.Uint64(b[:])
}

// cryptoPerm is a uniformly random permutation of 0..n-1 (Fisher–Yates
// over crypto/rand).
func cryptoPerm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := int(cryptoUint64() % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}
