package aggregator

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// Prepared is a message after the part of Apply that depends only on its
// bytes and the keys (Partition.Prepare): the control message parsed, or
// the onion layer peeled (HPKE), the report parsed, its report token
// checked (nonce binding and VOPRF verification) and, for FT_u, its ARC
// presentation verified. Partition.ApplyPrepared does the rest — the
// partition-state rules (epochs, spent tokens, duplicates, per-(group, x)
// presentation verdicts, recovery) — in the message's order. The zero
// value is not a valid Prepared.
type Prepared struct {
	drop    string            // the message is dropped for this reason (malformed, unknown-key, malformed-control, and control.go's)
	control *protocol.Control // a control message
	report  *star.Report
	checks  reportChecks
}

// reportChecks are the verdicts on a report's token and presentation that
// depend on nothing but the report's bytes and the epoch's keys. The state
// step (applyReport) consults them in the order checkToken and
// checkPresentation define, so the verdict is the same as when Apply
// judged the report alone.
type reportChecks struct {
	tokenOn, arcOn bool // ReportKeys / ARCKeys were set when prepared
	deferred       bool // prepared for verification at the threshold (checkDeferred: no key was used)
	// later: a key the checks need was not loaded when prepared (Prepare
	// never loads keys: the epoch names come from clients); the state
	// step loads it, once the report's epoch is known to be open, and
	// checks the report itself.
	later bool
	// token: pre is "no-token" or "bad-token" (does not parse, not bound
	// to the report), judged before the spent check; spend is the token's
	// spend id; post is "token-key" or "bad-token" (does not verify),
	// judged after it.
	tokenPre, tokenPost string
	spend               [32]byte
	// presentation (FT_u with ARCKeys): present, the star.ARCTagDigest of
	// the tag bytes inside the encoding (quickTag, quickOK: for the
	// per-(group, x) repeat rule), and the verdict of a full verification:
	// "", "arc-key" or "bad-presentation"; tag is the star.ARCTagDigest of
	// the verified tag (its first 16 bytes the unit id the payload must
	// carry).
	presPresent bool
	quickOK     bool
	xOK         bool // deferred: the share's x is the one quickTag's tag gives
	quickTag    [32]byte
	presVerdict string
	tag         [32]byte
}

// Prepare does the part of Apply(m) that depends only on m's bytes and
// the keys (Keys, ReportKeys, ARCKeys): ParseControl, or onion.Peel,
// star.ParseReport and the report's cheap checks (the report token's
// binding, the presentation's size and the x its tag gives). With
// VerifyOnArrival it also verifies the report token (VOPRF, ~50 µs) and
// the ARC presentation (~0.6 ms, FT_u); without (the default) those wait
// for the threshold (threshold.go). It uses
// only the epoch keys the partition loaded before (when an EpochOpen was
// applied, or at an earlier report of the epoch), never loads one for an
// epoch a client names; a report whose epoch's keys are not loaded is
// checked by ApplyPrepared instead. It reads
// no partition state, so it is safe to call from many goroutines at once,
// also while ApplyPrepared runs; the Service prepares a batch on a pool of
// GOMAXPROCS goroutines. It is deterministic: ApplyPrepared(Prepare(m))
// is exactly Apply(m), so replay gives the same verdicts however the
// messages were prepared. The keys of Keys must be prepared
// (onion.PrepareKeys) before concurrent use.
func (p *Partition) Prepare(m Message) Prepared {
	if m.Control {
		return p.prepareControl(m)
	}
	hop, inner, err := onion.Peel(p.Keys, m.Value)
	if err != nil {
		if errors.Is(err, onion.ErrUnknownKey) {
			return Prepared{drop: "unknown-key"}
		}
		return Prepared{drop: "malformed"}
	}
	if hop.Kind != onion.HopDeliver {
		return Prepared{drop: "malformed"}
	}
	r, err := star.ParseReport(inner)
	if err != nil {
		return Prepared{drop: "malformed"}
	}
	return Prepared{report: r, checks: p.check(r, false)}
}

// ApplyPrepared applies a message prepared by Prepare on this partition
// (or on one with the same Keys, ReportKeys and ARCKeys) and returns what
// to emit, in order. Prepared messages must be applied in the order of
// their messages, each once.
func (p *Partition) ApplyPrepared(pm *Prepared) []protocol.Decrypted {
	switch {
	case pm.drop != "":
		p.drop(pm.drop)
		return nil
	case pm.control != nil:
		return p.applyControl(pm.control)
	case pm.report != nil:
		return p.applyReport(pm.report, &pm.checks)
	}
	p.drop("malformed") // the zero Prepared
	return nil
}

// check computes a report's reportChecks under the partition's keys:
// with load, loading the keys of the report's epoch (ReportKeys, ARCKeys)
// when they are not loaded yet; without, only with keys loaded before
// (c.later when one is missing).
func (p *Partition) check(r *star.Report, load bool) reportChecks {
	c := reportChecks{tokenOn: p.ReportKeys != nil, arcOn: p.ARCKeys != nil, deferred: p.deferred()}
	if c.deferred {
		p.checkDeferred(r, &c)
		return c
	}
	if c.tokenOn {
		p.checkTokenBytes(r, &c, load)
	}
	// checks in order of cost: a report whose token already failed is
	// dropped for it (checkToken runs before checkPresentation) and never
	// costs an ARC verification, ~10 × a token's
	tokenFailed := c.tokenOn && (c.tokenPre != "" || c.tokenPost != "")
	if c.arcOn && r.Policy == star.FTu && !c.later && !tokenFailed {
		p.checkPresentationBytes(r, &c, load)
	}
	return c
}

// checkTokenBytes is the stateless part of checkToken.
func (p *Partition) checkTokenBytes(r *star.Report, c *reportChecks, load bool) {
	t := p.tokenBinding(r, c)
	if t == nil {
		return
	}
	key := p.reportKey(r.Epoch, load)
	if key == nil && !load {
		c.later = true
		return
	}
	if key == nil {
		c.tokenPost = "token-key"
		return
	}
	id := key.KeyID()
	ck := cacheKey("crowdlog-v1 aggregator verified token", []byte(r.Epoch), id[:], r.Token)
	if p.cache.has(ck) {
		return
	}
	if key.Verify(t) != nil {
		c.tokenPost = "bad-token"
		return
	}
	p.cache.add(ck)
}

// checkPresentationBytes is the stateless part of checkPresentation.
func (p *Partition) checkPresentationBytes(r *star.Report, c *reportChecks, load bool) {
	if len(r.Presentation) == 0 {
		return
	}
	c.presPresent = true
	if tag, ok := presentationTag(r.Presentation); ok {
		c.quickOK, c.quickTag = true, star.ARCTagDigest(tag)
	}
	key := p.arcKey(r.Epoch, load)
	if key == nil && !load {
		c.later = true
		return
	}
	if key == nil {
		c.presVerdict = "arc-key"
		return
	}
	ctx := r.ARCContext()
	ck := cacheKey("crowdlog-v1 aggregator verified presentation", key.pub, ctx, r.Presentation)
	var tag []byte
	if p.cache.has(ck) {
		tag, _ = presentationTag(r.Presentation) // verified before: the encoding parsed, so its tag is there
	} else {
		p.arcChecks.Add(1)
		pres, err := arc.ParsePresentation(r.Presentation)
		if err != nil || key.verify(pres, ctx) != nil {
			c.presVerdict = "bad-presentation"
			return
		}
		tag = pres.Tag()
		p.cache.add(ck)
	}
	if r.CheckARCShare(tag) != nil {
		c.presVerdict = "bad-presentation"
		return
	}
	c.tag = star.ARCTagDigest(tag)
}

// cacheKey is SHA-256(domain ‖ each part with its 8-byte length).
func cacheKey(domain string, parts ...[]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(domain))
	var n [8]byte
	for _, b := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// verifyCache remembers what verified: report tokens (keyed by epoch, the
// key's id and the token's bytes) and ARC presentations (keyed by the ARC
// public key, the presentation context and the presentation's bytes), so
// a message delivered twice, or a client's repeated impressions that carry
// the same presentation bytes, are verified once, across all partitions of
// a Service. Only good verdicts are kept, and a key covers every input of
// the verification, so a hit gives the verdict a verification would: the
// cache changes the cost, never a verdict. Bounded: two generations of at
// most max entries each (~100 B an entry); when the current one is full
// the older is forgotten. A nil *verifyCache remembers nothing.
type verifyCache struct {
	mu       sync.Mutex
	max      int
	cur, old map[[32]byte]struct{}
}

// defaultVerifyCacheEntries is the generation size of a Service's cache
// (two generations: at most ~26 MB).
const defaultVerifyCacheEntries = 1 << 17

func newVerifyCache(max int) *verifyCache {
	return &verifyCache{max: max, cur: map[[32]byte]struct{}{}}
}

func (c *verifyCache) has(k [32]byte) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.cur[k]; ok {
		return true
	}
	_, ok := c.old[k]
	return ok
}

func (c *verifyCache) add(k [32]byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cur) >= c.max {
		c.old, c.cur = c.cur, make(map[[32]byte]struct{}, c.max)
	}
	c.cur[k] = struct{}{}
}

// prepareChunk is the number of messages a worker takes at a time.
const prepareChunk = 8

// prepPool is the process's pool of Prepare workers: GOMAXPROCS
// goroutines (as of its first use) shared by every partition of every
// Service in the process, started once and never stopped (idle, they wait
// on a channel).
var prepPool struct {
	once sync.Once
	work chan *prepBatch
	n    int
}

// prepBatch is one partition's batch: workers and the caller take chunks
// of it by an atomic index.
type prepBatch struct {
	p    *Partition
	msgs []Message
	out  []Prepared
	next atomic.Int64
	wg   sync.WaitGroup
}

func (b *prepBatch) run() {
	n := int64(len(b.msgs))
	for {
		lo := b.next.Add(prepareChunk) - prepareChunk
		if lo >= n {
			return
		}
		for i := lo; i < min(lo+prepareChunk, n); i++ {
			b.out[i] = b.p.Prepare(b.msgs[i])
		}
	}
}

// PrepareBatch prepares msgs (Prepare) on the process's pool of
// GOMAXPROCS goroutines, the caller's included, and returns the results in
// the order of msgs. The caller works too, so a busy pool slows a batch
// but never blocks it.
func (p *Partition) PrepareBatch(msgs []Message) []Prepared {
	prepPool.once.Do(func() {
		prepPool.n = runtime.GOMAXPROCS(0)
		prepPool.work = make(chan *prepBatch, prepPool.n)
		for range prepPool.n {
			go func() {
				for b := range prepPool.work {
					b.run()
					b.wg.Done()
				}
			}()
		}
	})
	b := &prepBatch{p: p, msgs: msgs, out: make([]Prepared, len(msgs))}
	chunks := (len(msgs) + prepareChunk - 1) / prepareChunk
	for range min(prepPool.n, chunks) - 1 {
		b.wg.Add(1)
		select {
		case prepPool.work <- b:
		default: // every worker is busy: the caller does the rest
			b.wg.Done()
		}
	}
	b.run()
	b.wg.Wait()
	return b.out
}
