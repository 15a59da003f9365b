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
package ingest

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// Route is the onion route [relay A, relay B, aggregator]: the public keys of
// each hop and the NATS subject of relay B (relay A's subject is the
// publisher's).
type Route struct {
	RelayA, RelayB, Aggregator onion.PublicKey
	SubjectB                   string
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

// Randomness evaluates OPRF inputs of an epoch into ω values, in order
// (satisfied by *oprfclient.Client). Implementations verify the service's
// VOPRF proof against the epoch's pinned public key (RFC 9497 §3.3.2) and
// fail — never return unverified ω — when it does not hold.
type Randomness interface {
	Evaluate(ctx context.Context, epoch string, inputs [][]byte) ([][]byte, error)
}

// Client seals and sends the artifacts of one application under one policy:
// the stateless sealer under a Device (which keeps the user secret and what
// was sent). It is safe for concurrent use: each call handles one user, whose
// secret the caller keeps.
type Client struct {
	App        apps.App
	Epoch      string
	Policy     star.Policy
	K          int
	Randomness Randomness
	Route      Route
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
	// Spread is the window over which one user's reports are sent: each
	// report leaves at its own uniformly random offset in [0, Spread) from
	// the end of sealing, in a random order, so an observer of relay a's
	// inbox does not see one user's artifacts as one burst. 0 sends them
	// back to back (still in a random order): log replays and tests.
	Spread time.Duration
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
	onions, err := c.seal(ctx, secret, LimitArtifacts(arts, c.Limit, c.LimitDistinct))
	if err != nil {
		return 0, err
	}
	return c.send(ctx, onions)
}

// seal returns one onion per artifact of arts (no limit applied): ω for
// each distinct artifact, one report each instance, three layers.
func (c *Client) seal(ctx context.Context, secret *star.UserSecret, arts []apps.Artifact) ([][]byte, error) {
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
	omegas, err := c.Randomness.Evaluate(ctx, c.Epoch, inputs)
	if err != nil {
		return nil, err
	}
	if len(omegas) != len(inputs) {
		return nil, fmt.Errorf("randomness: %d outputs for %d inputs", len(omegas), len(inputs))
	}
	sealings := make([]*star.Sealing, len(inputs))
	onions := make([][]byte, 0, len(arts))
	meaning := apps.Meaning(c.App)
	for _, a := range arts {
		i := index[a.Primary]
		if sealings[i] == nil {
			s, err := star.DeriveSealingIn(omegas[i], star.Context{App: c.App.Name(), Meaning: meaning, Epoch: c.Epoch, Policy: c.Policy, K: c.K})
			if err != nil {
				return nil, err
			}
			sealings[i] = &s
		}
		r, err := sealings[i].Seal(secret, a.Primary, a.Secondary)
		if err != nil {
			return nil, fmt.Errorf("seal: %w", err)
		}
		onion, err := c.Route.Wrap(r)
		if err != nil {
			return nil, fmt.Errorf("onion: %w", err)
		}
		onions = append(onions, onion)
	}
	return onions, nil
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
