// Package prio3 is the client side of PDD's Prio3 mode (the two-aggregator
// Prio3 VDAF, draft-irtf-cfrg-vdaf-14 §7, in DAP's report layout,
// draft-ietf-ppm-dap §4.5): once per active day a client turns that day's
// keyword counts into the campaign's dense measurement (one entry per
// monitored keyword, keywords.List order), clips it, splits it into a
// leader's and a helper's share with a proof that it is in range
// (protocol/prio3 VDAF.Shard), and sends the upload — sealed to the leader,
// the helper's share sealed to the helper inside — through the onion relays
// to Kafka topic "prio3-uploads". There are no groups, no coordinator and
// no recovery round: a client that does not upload on a day costs that day
// only its own counts. A client uploads at most one report per day, also
// across restarts (Client.StatePath).
//
// A client-side blacklist (PDD §6.1) removes keywords the user never shares
// before anything is counted (keywords.List.Counts).
//
// Per-person bound: in a SumVec campaign with an L1 bound S (p3.Config.L1,
// the campaign's --l1) the client keeps its day's sum of clipped counts
// within S, keeping its most searched keywords (ties: the earlier keyword
// in the list; protocol/prio3 Config.Clip, applied by VDAF.Shard), as a
// presence client keeps its MaxWeight most searched keywords. The
// aggregators' noise of scale S/ε then hides the whole day of one person.
package prio3

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/crowdlog/crowdlog/infra/atomicfile"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// ErrAlreadySent is returned by Upload for a day the client uploaded on
// already: a second upload would carry a fresh report id and count the
// client twice, so the client refuses it.
var ErrAlreadySent = errors.New("prio3: this client uploaded for that day already")

// Transport is what a client sends through: the relays' route (RelayA,
// RelayB and SubjectB; the aggregator key is unused, the upload is sealed
// to the leader), the leader's report key and the helper's input-share key
// (onion key files of the campaign's operators), and the publisher to relay
// A (ingest/publish.Publisher.Publish, which bounds its waits by ctx).
type Transport struct {
	// Route is the onion route to relay B (RelayA, RelayB, SubjectB).
	Route ingest.Route
	// Leader and Helper are the two aggregators' keys: the leader's
	// report key and the helper's input-share key.
	Leader, Helper onion.PublicKey
	Publish        func(ctx context.Context, onion []byte) error
}

// Client is one Prio3-mode client of a campaign. Counts holds its keyword
// counts per day (keywords.List.Counts, blacklist applied); Config is the
// campaign's measurement (Length = List.Len()). It is safe for concurrent
// use, but Upload serializes per client.
//
// Its state — the days it uploaded for, and the onion of a day whose
// publish has not succeeded yet — is kept in memory, and in the file
// StatePath when set (written atomically before every publish and after
// it, mode 0600; Open reads it back). A day is uploaded at most once: a
// retry, also after a restart, publishes the same onion again (the same
// report id, which the aggregators count once per batch), never a second
// report.
type Client struct {
	// Campaign names the Prio3 campaign (the relays' Kafka key).
	Campaign string
	List     *keywords.List
	Counts   map[keywords.Day]keywords.Sparse
	Config   p3.Config
	// StatePath, when set, is the file the client's state is kept in.
	StatePath string
	// HelperToken, when set, fetches the report's helper token (an encoded
	// protocol/token KindPrio3Helper token) for campaign, day and nonce
	// (Report.HelperNonce) from the helper operator's issuer with this
	// client's identity (tokenclient.Client.Prio3HelperToken): one per
	// identity per campaign-day, attached to the report before it is
	// sealed. A helper that requires tokens refuses a report without one.
	HelperToken func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error)
	// LeaderToken is HelperToken for the report's leader token (protocol/
	// token KindPrio3Leader, same nonce) from the leader operator's issuer
	// (tokenclient.Client.Prio3LeaderToken). A leader that requires tokens
	// refuses a report without one.
	LeaderToken func(ctx context.Context, campaign string, day p3.Day, nonce [32]byte) ([]byte, error)

	mu      sync.Mutex
	sent    map[keywords.Day]bool
	pending map[keywords.Day]pendingUpload
	// sharded holds, in memory only, a day's report whose tokens an
	// Upload did not all get; dropped once the day's onion is pending
	sharded map[keywords.Day]*shardedReport
}

// shardedReport is a day's sharded report, the measurement it shards,
// how many counts were clipped and the helper key it was sealed to.
type shardedReport struct {
	r       *p3.Report
	m       []uint64
	clipped int
	helper  onion.PublicKey
}

func sameKey(a, b onion.PublicKey) bool {
	return a.ID == b.ID && a.Role == b.Role && (a.Key == nil) == (b.Key == nil) && (a.Key == nil || a.Key.Equal(b.Key))
}

// pendingUpload is a day's onion built but not yet published.
type pendingUpload struct {
	onion   []byte
	id      p3.ReportID
	clipped int
}

// Sent says what one Upload did: the report id (the VDAF nonce), how many
// of the day's keyword counts were reduced to the measurement's maximum
// (2^b − 1 for clipped counts, and those reduced or left out to keep the
// L1 bound; for presence, 1 per count above 1 plus the keywords left out
// over the campaign's max weight), and the length of the
// onion published to relay A, in bytes.
type Sent struct {
	// ID is the report id (the VDAF nonce, 16 bytes).
	ID p3.ReportID
	// Clipped counts the keyword counts reduced or left out.
	Clipped int
	// Bytes is the length of the onion published to relay A.
	Bytes int
}

// Measurement returns the client's dense measurement of day d: one count per
// keyword of List (zeros where it did not search the keyword). For a
// presence campaign with more than Config.MaxWeight keywords searched, only
// the MaxWeight keywords with the highest counts are kept (ties: the
// earlier keyword in the list); dropped is how many were left out.
func (c *Client) Measurement(d keywords.Day) (m []uint64, dropped int) {
	m = c.Counts[d].Dense(c.List.Len())
	if c.Config.Kind != p3.KindPresence {
		return m, 0
	}
	var set []int
	for i, x := range m {
		if x > 0 {
			set = append(set, i)
		}
	}
	if len(set) <= c.Config.MaxWeight {
		return m, 0
	}
	slices.SortStableFunc(set, func(a, b int) int { return cmp.Compare(m[b], m[a]) })
	for _, i := range set[c.Config.MaxWeight:] {
		m[i] = 0
	}
	return m, len(set) - c.Config.MaxWeight
}

// Upload sends the client's report for day d: the measurement of d
// (Measurement), clipped and sharded by v (which must be the campaign's
// VDAF, protocol/prio3.New(Campaign, Config); a VDAF is not safe for
// concurrent use, so give each goroutine its own), wrapped for the relays
// (ingest.Route.WrapPrio3) and published to relay A. A day without counts
// is uploaded as zeros: the report still says the client was active. When
// an earlier Upload of d built its onion but did not publish it (an error,
// a crash), that same onion is published again.
// Errors: ErrAlreadySent, a measurement the VDAF refuses, an onion that
// does not seal, the state file's write error, or the publisher's (the day
// then stays pending and a later Upload retries it), or a token's (the
// sharded report and the tokens it got are kept in memory: a later Upload
// of the day with the same counts sends that report and asks only for the
// tokens it lacks, each issuing one per identity and day).
func (c *Client) Upload(ctx context.Context, tr *Transport, v *p3.VDAF, d keywords.Day) (Sent, error) {
	var s Sent
	if d < 0 {
		return s, fmt.Errorf("prio3: day %d before 1970-01-01", d)
	}
	if v.Config.Length != c.List.Len() {
		return s, fmt.Errorf("prio3: the campaign measures %d keywords, the client's list has %d: load the campaign's list", v.Config.Length, c.List.Len())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent[d] {
		return s, fmt.Errorf("%w: %s", ErrAlreadySent, d)
	}
	p, ok := c.pending[d]
	if !ok {
		m, dropped := c.Measurement(d)
		// a report sharded by an Upload that failed getting its tokens is
		// taken again (same nonce, the tokens it got): each issuer gives
		// one token per day and recognizes the same request again
		sh := c.sharded[d]
		if sh == nil || !slices.Equal(sh.m, m) || sh.r.Campaign != c.Campaign || !sameKey(sh.helper, tr.Helper) {
			r, clipped, err := v.ShardReport(c.Campaign, p3.Day(d), m, tr.Helper)
			if err != nil {
				return s, fmt.Errorf("prio3: shard the report of %s: %w", d, err)
			}
			sh = &shardedReport{r: r, m: m, clipped: clipped, helper: tr.Helper}
			if c.sharded == nil {
				c.sharded = map[keywords.Day]*shardedReport{}
			}
			c.sharded[d] = sh
		}
		r, clipped := sh.r, sh.clipped
		var err error
		if c.HelperToken != nil && len(r.HelperToken) == 0 {
			if r.HelperToken, err = c.HelperToken(ctx, c.Campaign, p3.Day(d), r.HelperNonce()); err != nil {
				return s, fmt.Errorf("prio3: helper token for the report of %s (the report is kept for the next upload of the day): %w", d, err)
			}
		}
		if c.LeaderToken != nil && len(r.LeaderToken) == 0 {
			if r.LeaderToken, err = c.LeaderToken(ctx, c.Campaign, p3.Day(d), r.HelperNonce()); err != nil {
				return s, fmt.Errorf("prio3: leader token for the report of %s (the report is kept for the next upload of the day): %w", d, err)
			}
		}
		upload, err := r.Seal(tr.Leader)
		if err != nil {
			return s, fmt.Errorf("prio3: seal the report of %s: %w", d, err)
		}
		id := r.ID
		o, err := tr.Route.WrapPrio3(c.Campaign, upload)
		if err != nil {
			return s, fmt.Errorf("prio3: wrap the report of %s: %w", d, err)
		}
		p = pendingUpload{onion: o, id: id, clipped: clipped + dropped}
		if c.pending == nil {
			c.pending = map[keywords.Day]pendingUpload{}
		}
		c.pending[d] = p
		delete(c.sharded, d)
		if err := c.save(); err != nil {
			return s, err
		}
	}
	if err := tr.Publish(ctx, p.onion); err != nil {
		return s, fmt.Errorf("prio3: publish the report of %s to relay a (kept; the next upload of the day sends it again): %w", d, err)
	}
	if c.sent == nil {
		c.sent = map[keywords.Day]bool{}
	}
	c.sent[d] = true
	delete(c.pending, d)
	if err := c.save(); err != nil {
		return s, err
	}
	return Sent{ID: p.id, Clipped: p.clipped, Bytes: len(p.onion)}, nil
}

// state is the client's file format (JSON).
type state struct {
	Campaign string         `json:"campaign"`
	Sent     []keywords.Day `json:"sent"`
	Pending  []pendingState `json:"pending,omitempty"`
}

type pendingState struct {
	Day     keywords.Day `json:"day"`
	Onion   []byte       `json:"onion"`
	ID      []byte       `json:"id"`
	Clipped int          `json:"clipped"`
}

func (c *Client) save() error {
	if c.StatePath == "" {
		return nil
	}
	st := state{Campaign: c.Campaign, Sent: slices.Sorted(maps.Keys(c.sent))}
	for _, d := range slices.Sorted(maps.Keys(c.pending)) {
		p := c.pending[d]
		st.Pending = append(st.Pending, pendingState{Day: d, Onion: p.onion, ID: p.id[:], Clipped: p.clipped})
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(c.StatePath, b, 0o600); err != nil {
		return fmt.Errorf("prio3: client state %s: %w", c.StatePath, err)
	}
	return nil
}

// Open reads the state of a client written with StatePath set into a
// client of campaign (List, Counts and Config are the caller's to set).
// Errors name the file and what is wrong in it (never its onions).
func Open(path, campaign string) (*Client, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("prio3: client state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("prio3: client state %s: %w", path, err)
	}
	if st.Campaign != campaign {
		return nil, fmt.Errorf("prio3: client state %s is of campaign %q, not %q", path, st.Campaign, campaign)
	}
	c := &Client{Campaign: campaign, StatePath: path, sent: map[keywords.Day]bool{}, pending: map[keywords.Day]pendingUpload{}}
	for _, d := range st.Sent {
		c.sent[d] = true
	}
	for _, p := range st.Pending {
		if len(p.ID) != p3.NonceSize || len(p.Onion) == 0 || c.sent[p.Day] {
			return nil, fmt.Errorf("prio3: client state %s: bad pending upload of %s", path, p.Day)
		}
		c.pending[p.Day] = pendingUpload{onion: p.Onion, id: p3.ReportID(p.ID), clipped: p.Clipped}
	}
	return c, nil
}
