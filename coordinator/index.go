package coordinator

// The active index: who is active on which day, so that group formation
// reads one day's entries instead of every registered client.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/blind"
)

// The active index is the JetStream stream ActiveStream (file storage;
// natsconn.Replicas copies when created, an existing stream keeps its own),
// one subject per campaign and day: ActiveSubject(campaign, day) =
// "crowdlog.pdd.active.<campaign>.<day>", day a keywords.Day number. Each
// message is one ActiveEntry as JSON, published with Nats-Msg-Id
// "<campaign>.<day>.<id>" so that a retried publish within
// ActiveDuplicateWindow is stored once; ActiveOn drops any later duplicate
// (keeping the first), so one that escapes the window is harmless too.
// Messages expire after the retention given to EnsureActiveIndex.
const (
	ActiveStream        = protocol.PDDActiveStream
	ActiveSubjectPrefix = protocol.PDDActiveSubjectPrefix
	// ActiveDuplicateWindow is the stream's deduplication window.
	ActiveDuplicateWindow = 2 * time.Minute
	// activeMaxMsgSize bounds one entry (an entry is ≈ 230 bytes of JSON).
	activeMaxMsgSize = 4096
	// activeReadIdle is how long ActiveOn waits for the next entry of a day
	// before giving up (the entries are stored already; only a stalled
	// server or an expired day makes it wait).
	activeReadIdle = 30 * time.Second
	// activeBatch (2^activeBatchBits) is how many entries a pull request
	// asks for, and the unit of work of ActiveOn's decoders.
	activeBatchBits = 12
	activeBatch     = 1 << activeBatchBits
)

// ActiveEntry is one client's activity on one day of a campaign, written on
// its ping (RecordActive) and read back at formation (ActiveOn): everything
// group formation and the roster need of the client, so formation never
// reads the client records.
type ActiveEntry struct {
	// ID is the client id (handleRegister: 32 hex digits; RecordActive
	// accepts 1–64 of [A-Za-z0-9_-], no dots).
	ID string `json:"id"`
	// Public is the client's long-term X25519 public key, 32 bytes.
	Public []byte `json:"public"`
	// Sign is the client's Ed25519 public key, 32 bytes (or empty).
	Sign []byte `json:"sign"`
	// Mask is the client's X25519 round mask public key, 32 bytes (or empty).
	Mask []byte `json:"mask"`
	// Prior is the number of the client's active days in [campaign start,
	// day−1] when the entry was written, day being the entry's day: the n
	// of the activity heuristic (PDD eq. 5) when the entry's day is formed
	// as a round.
	Prior int `json:"prior"`
}

// ActiveSubject returns the subject of campaign's entries for day:
// "crowdlog.pdd.active.<campaign>.<day>". The day is the last token, so
// campaigns containing dots ("flu.v2") cannot collide with one another.
func ActiveSubject(campaign string, day int32) string {
	return ActiveSubjectPrefix + campaign + "." + strconv.Itoa(int(day))
}

func activeMsgID(campaign string, day int32, id string) string {
	return campaign + "." + strconv.Itoa(int(day)) + "." + id
}

// validActiveCampaign reports whether campaign is a blind.ValidCampaign name
// that also makes a valid subject: no empty token (leading, trailing or
// doubled dot).
func validActiveCampaign(campaign string) bool {
	if !blind.ValidCampaign(campaign) || campaign[0] == '.' || campaign[len(campaign)-1] == '.' {
		return false
	}
	for i := 1; i < len(campaign); i++ {
		if campaign[i] == '.' && campaign[i-1] == '.' {
			return false
		}
	}
	return true
}

func validActiveID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// EnsureActiveIndex creates or updates the stream ActiveStream (subjects
// "crowdlog.pdd.active.>", file storage, entries kept for retention — ≤ 0
// means 30 days — deduplication window ActiveDuplicateWindow). It is
// idempotent and safe to call from several processes at once; the last
// caller's retention wins. Retention must cover the round being formed
// (the day before the clock's day); the heuristic needs no older day, as
// each entry carries its Prior.
func EnsureActiveIndex(ctx context.Context, js jetstream.JetStream, retention time.Duration) error {
	if js == nil {
		return errors.New("coordinator: EnsureActiveIndex: nil JetStream")
	}
	if err := natsconn.EnsureStream(ctx, js, ActiveIndexConfig(retention, natsconn.StreamReplicas(ctx, js, ActiveStream))); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	return nil
}

// ActiveIndexConfig is the configuration of the stream ActiveStream:
// subjects ActiveSubjectPrefix + ">", file storage, messages kept
// retention (<= 0: 30 days), replicas copies. EnsureActiveIndex (the
// admin step, `crowdlog streams`) applies it; the coordinator only looks
// the stream up.
func ActiveIndexConfig(retention time.Duration, replicas int) jetstream.StreamConfig {
	if retention <= 0 {
		retention = 30 * 24 * time.Hour
	}
	return jetstream.StreamConfig{
		Name:        ActiveStream,
		Description: "crowdlog PDD coordinator: clients active per campaign and day",
		Subjects:    []string{ActiveSubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxAge:      retention,
		MaxMsgSize:  activeMaxMsgSize,
		Duplicates:  ActiveDuplicateWindow,
		Replicas:    max(replicas, 1),
	}
}

// checkActive validates a campaign, day's entry before it is published.
func checkActive(campaign string, e ActiveEntry) error {
	switch {
	case !validActiveCampaign(campaign):
		return fmt.Errorf("coordinator: active index: campaign %q: use 1-64 of [A-Za-z0-9._-], no empty dot-separated part", campaign)
	case !validActiveID(e.ID):
		return fmt.Errorf("coordinator: active index: client id %q: use 1-64 of [A-Za-z0-9_-]", e.ID)
	case len(e.Public) != 32:
		return fmt.Errorf("coordinator: active index: client %s: public key has %d bytes, want 32", e.ID, len(e.Public))
	case len(e.Sign) != 0 && len(e.Sign) != 32:
		return fmt.Errorf("coordinator: active index: client %s: signing key has %d bytes, want 32 (or none)", e.ID, len(e.Sign))
	case len(e.Mask) != 0 && len(e.Mask) != 32:
		return fmt.Errorf("coordinator: active index: client %s: mask key has %d bytes, want 32 (or none)", e.ID, len(e.Mask))
	case e.Prior < 0:
		return fmt.Errorf("coordinator: active index: client %s: prior %d < 0", e.ID, e.Prior)
	}
	return nil
}

// RecordActive adds e to campaign's entries for day (ActiveSubject) and
// waits for the stream's acknowledgement, so on a nil return the entry is
// stored. It publishes with Nats-Msg-Id "<campaign>.<day>.<e.ID>": calling
// it again for the same client and day (a retried ping) within
// ActiveDuplicateWindow stores nothing new, and ActiveOn keeps the first
// entry anyway. Errors name the campaign, day and client and say whether the
// stream is missing (call EnsureActiveIndex) or the entry is malformed.
func RecordActive(ctx context.Context, js jetstream.JetStream, campaign string, day int32, e ActiveEntry) error {
	if err := checkActive(campaign, e); err != nil {
		return err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("coordinator: active index: encode client %s: %w", e.ID, err)
	}
	if _, err := js.Publish(ctx, ActiveSubject(campaign, day), b, jetstream.WithMsgID(activeMsgID(campaign, day, e.ID)),
		jetstream.WithExpectStream(ActiveStream)); err != nil {
		hint := ""
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) {
			hint = " (no stream " + ActiveStream + ": call EnsureActiveIndex first)"
		}
		return fmt.Errorf("coordinator: active index: record client %s on %s day %d: %w%s", e.ID, campaign, day, err, hint)
	}
	return nil
}

// rawBatch is a run of stored entries in stream order: batch number n holds
// the entries of indexes n·activeBatch … (all batches but the last are full).
type rawBatch struct {
	n    int
	seqs []uint64
	data [][]byte
}

// ActiveOn returns campaign's entries for day: every message stored on
// ActiveSubject(campaign, day) up to the subject's last sequence when it is
// called (entries published meanwhile may or may not be included), one per
// client — the first stored when a client has several — sorted by ID
// ascending. A day with no entries gives nil, nil. It reads with an ordered
// consumer pulling activeBatch entries at a time and decodes on all CPUs;
// it waits at most activeReadIdle for each next entry (and until ctx ends),
// and the error then says which sequence it was waiting for and how many
// entries it had. A malformed entry is an error naming its sequence.
func ActiveOn(ctx context.Context, js jetstream.JetStream, campaign string, day int32) ([]ActiveEntry, error) {
	if !validActiveCampaign(campaign) {
		return nil, fmt.Errorf("coordinator: active index: campaign %q: use 1-64 of [A-Za-z0-9._-], no empty dot-separated part", campaign)
	}
	subj := ActiveSubject(campaign, day)
	st, err := js.Stream(ctx, ActiveStream)
	if err != nil {
		return nil, fmt.Errorf("coordinator: active index: stream %s: %w (call EnsureActiveIndex first)", ActiveStream, err)
	}
	lastMsg, err := st.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("coordinator: active index: last entry of %s: %w", subj, err)
	}
	last := lastMsg.Sequence

	cons, err := js.OrderedConsumer(ctx, ActiveStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subj}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("coordinator: active index: consumer on %s: %w", subj, err)
	}

	work := make(chan rawBatch, 2*runtime.GOMAXPROCS(0))
	quit := make(chan struct{})
	b := &activeBatcher{last: last, work: work, quit: quit, done: make(chan struct{}), cur: newRawBatch(0)}
	dec := startActiveDecoders(work, quit, subj)
	cc, err := cons.Consume(b.handle, jetstream.PullMaxMessages(activeBatch))
	if err != nil {
		close(quit)
		dec.wg.Wait()
		return nil, fmt.Errorf("coordinator: active index: read %s: %w", subj, err)
	}
	fail := func(err error) ([]ActiveEntry, error) {
		close(quit)
		cc.Stop()
		dec.wg.Wait()
		return nil, err
	}
	if err := b.wait(ctx, subj); err != nil {
		return fail(err)
	}
	cc.Stop()
	if b.metaErr != nil {
		return fail(fmt.Errorf("coordinator: active index: read %s: %w", subj, b.metaErr))
	}
	close(work) // the handler is finished: nothing sends any more
	dec.wg.Wait()
	close(quit)
	if dec.err != nil {
		return nil, dec.err
	}
	return sortActive(dec.decoded), nil
}

// activeBatcher is ActiveOn's Consume handler: it batches raw messages
// (activeBatch each) for the decoders on work and stops at sequence last,
// closing done. It handles one message at a time, but guarded: an ordered
// consumer's reset may overlap two subscriptions.
type activeBatcher struct {
	last     uint64
	work     chan<- rawBatch
	quit     <-chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	cur      rawBatch
	prevSeq  uint64
	finished bool
	received atomic.Int64
	metaErr  error // set before done closes
}

func newRawBatch(n int) rawBatch {
	return rawBatch{n: n, seqs: make([]uint64, 0, activeBatch), data: make([][]byte, 0, activeBatch)}
}

// handle adds m to the current batch (messages at or before the last
// sequence seen are redeliveries and skipped), sends the batch when it is
// full or m is the last, and ends the read at the last sequence or at a
// message without metadata.
func (a *activeBatcher) handle(m jetstream.Msg) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.finished {
		return
	}
	md, err := m.Metadata()
	if err != nil {
		a.metaErr, a.finished = err, true
		close(a.done)
		return
	}
	seq := md.Sequence.Stream
	if seq <= a.prevSeq {
		return
	}
	a.prevSeq = seq
	a.received.Add(1)
	a.cur.seqs, a.cur.data = append(a.cur.seqs, seq), append(a.cur.data, m.Data())
	if len(a.cur.data) == activeBatch || seq >= a.last {
		select {
		case a.work <- a.cur:
		case <-a.quit:
			a.finished = true
			return
		}
		a.cur = newRawBatch(a.cur.n + 1)
	}
	if seq >= a.last {
		a.finished = true
		close(a.done)
	}
}

// wait returns once the handler reached the last sequence, or an error
// naming subj when ctx ends or no entry arrived for activeReadIdle.
func (a *activeBatcher) wait(ctx context.Context, subj string) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	seen, since := a.received.Load(), time.Now()
	for {
		select {
		case <-a.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("coordinator: active index: read %s up to sequence %d (%d entries so far): %w", subj, a.last, a.received.Load(), ctx.Err())
		case <-tick.C:
			if n := a.received.Load(); n != seen {
				seen, since = n, time.Now()
			} else if time.Since(since) > activeReadIdle {
				return fmt.Errorf("coordinator: active index: read %s: no entry for %v while waiting for sequence %d (%d entries so far; server stalled, or the day expired?)", subj, activeReadIdle, a.last, n)
			}
		}
	}
}

// activeDecoders decode ActiveOn's raw batches on all CPUs into decoded
// (indexed by batch number); err is the first decoding error. Read them
// after wg.Wait.
type activeDecoders struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	decoded [][]ActiveEntry
	err     error
}

// startActiveDecoders starts GOMAXPROCS decoders reading work until it is
// closed or quit closes.
func startActiveDecoders(work <-chan rawBatch, quit <-chan struct{}, subj string) *activeDecoders {
	d := &activeDecoders{}
	for range max(1, runtime.GOMAXPROCS(0)) {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			for {
				var b rawBatch
				var ok bool
				select {
				case b, ok = <-work:
					if !ok {
						return
					}
				case <-quit:
					return
				}
				es, err := decodeBatch(b, subj)
				d.mu.Lock()
				for len(d.decoded) <= b.n {
					d.decoded = append(d.decoded, nil)
				}
				d.decoded[b.n] = es
				if d.err == nil {
					d.err = err
				}
				d.mu.Unlock()
			}
		}()
	}
	return d
}

// sortActive returns the entries of batches (in stream order) sorted by ID,
// the first of each ID only. It sorts small keys: the ID's first 8 bytes
// decide most comparisons (IDs hold no zero byte, so zero padding keeps the
// order of strings), then the ID, then the stream order.
func sortActive(batches [][]ActiveEntry) []ActiveEntry {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	if n == 0 {
		return nil
	}
	at := func(i int32) *ActiveEntry { return &batches[i>>activeBatchBits][i&(activeBatch-1)] }
	type key struct {
		prefix uint64
		i      int32
	}
	keys := make([]key, 0, n)
	for bn, b := range batches {
		for j := range b {
			var p uint64
			for k := range 8 {
				p <<= 8
				if k < len(b[j].ID) {
					p |= uint64(b[j].ID[k])
				}
			}
			keys = append(keys, key{p, int32(bn<<activeBatchBits | j)})
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.prefix != b.prefix {
			return cmp.Compare(a.prefix, b.prefix)
		}
		return cmp.Or(strings.Compare(at(a.i).ID, at(b.i).ID), cmp.Compare(a.i, b.i))
	})
	out := make([]ActiveEntry, 0, n)
	for _, k := range keys {
		if e := at(k.i); len(out) == 0 || e.ID != out[len(out)-1].ID {
			out = append(out, *e)
		}
	}
	return out
}

// decodeBatch decodes b's entries, directly (fastDecodeEntry) when they are
// laid out as json.Marshal writes an ActiveEntry — every entry RecordActive
// stores — else with json.Unmarshal, to the same result either way. The
// batch's IDs share one string and its keys one array. The error names the
// first malformed entry's sequence.
func decodeBatch(b rawBatch, subj string) ([]ActiveEntry, error) {
	es := make([]ActiveEntry, len(b.data))
	arena := make([]byte, 0, 96*len(b.data))
	ids := make([]byte, 0, 32*len(b.data))
	ends := make([]int, len(b.data)) // end of es[i]'s ID in ids; −1: es[i].ID is set
	for i, data := range b.data {
		if id, e, a, ok := fastDecodeEntry(data, arena); ok {
			es[i], arena = e, a
			ids = append(ids, id...)
			ends[i] = len(ids)
			continue
		}
		err := json.Unmarshal(data, &es[i])
		if err == nil && !validActiveID(es[i].ID) {
			err = fmt.Errorf("client id %q: use 1-64 of [A-Za-z0-9_-]", es[i].ID)
		}
		if err != nil {
			return nil, fmt.Errorf("coordinator: active index: entry %d of %s: %w", b.seqs[i], subj, err)
		}
		ends[i] = -1
	}
	all, from := string(ids), 0
	for i, end := range ends {
		if end >= 0 {
			es[i].ID, from = all[from:end], end
		}
	}
	return es, nil
}

// fastDecodeEntry parses exactly
// {"id":"ID","public":K,"sign":K,"mask":K,"prior":N}, ID of [A-Za-z0-9_-]
// (1–64), each K null or a strict padded standard base64 string, N a
// decimal int of at most 18 digits, into e (all but ID) and the ID's bytes
// (within b); the keys are appended to arena. It reports false on anything
// else (arena is then returned unchanged).
func fastDecodeEntry(b, arena []byte) (id []byte, e ActiveEntry, _ []byte, ok bool) {
	in := arena
	lit := func(s string) bool {
		if len(b) < len(s) || string(b[:len(s)]) != s {
			return false
		}
		b = b[len(s):]
		return true
	}
	if !lit(`{"id":"`) {
		return nil, e, in, false
	}
	n := 0
	for n < len(b) && b[n] != '"' {
		n++
	}
	if n == len(b) || !validActiveID(string(b[:n])) {
		return nil, e, in, false
	}
	id, b = b[:n], b[n+1:]
	field := func(name string) ([]byte, bool) {
		if !lit(name) {
			return nil, false
		}
		if lit("null") {
			return nil, true
		}
		if !lit(`"`) {
			return nil, false
		}
		n := 0
		for n < len(b) && b[n] != '"' {
			n++
		}
		if n == len(b) || n%4 != 0 {
			return nil, false
		}
		at := len(arena)
		arena = slices.Grow(arena, n/4*3)[:at+n/4*3]
		m, err := base64.StdEncoding.Strict().Decode(arena[at:], b[:n])
		if err != nil {
			return nil, false
		}
		arena, b = arena[:at+m], b[n+1:]
		if m == 0 {
			return []byte{}, true // as json.Unmarshal decodes ""
		}
		return arena[at : at+m : at+m], true
	}
	var ok1, ok2, ok3 bool
	e.Public, ok1 = field(`,"public":`)
	if ok1 {
		e.Sign, ok2 = field(`,"sign":`)
	}
	if ok2 {
		e.Mask, ok3 = field(`,"mask":`)
	}
	if !ok3 || !lit(`,"prior":`) {
		return nil, ActiveEntry{}, in, false
	}
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	n = 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		e.Prior = e.Prior*10 + int(b[n]-'0')
		n++
	}
	if n == 0 || n > 18 || (n > 1 && b[0] == '0') || string(b[n:]) != "}" {
		return nil, ActiveEntry{}, in, false
	}
	if neg {
		e.Prior = -e.Prior
	}
	return id, e, arena, true
}

// FormGroups forms the groups of round (a day number, keywords.Day) of
// campaign from entries, the clients active on the round day (ActiveOn of
// that day), exactly as advanceOne does from the client records. It is
// PDD's group formation (Primault et al., WWW 2019, §3.4 "Enhanced
// Aggregation Protocol"), formed on day d = round+1:
//
//  1. entries are deduplicated by ID (the first kept) and sorted by ID
//     ascending; active is their number.
//  2. With heuristic, delay δ > 0 and idx = d − start > δ (start: the
//     campaign's first day), PDD eq. (5) keeps only clients active on at
//     least a 1/δ share of the days before the round day: Prior ≥ (idx−1)/δ,
//     Prior counting active days in [start, d−2] (ActiveEntry.Prior).
//  3. The remaining candidates, in ascending ID order, are shuffled by
//     ChaCha8 seeded with sha256("crowdlog-v1 pdd groups <campaign>
//     <round>") (math/rand/v2 Rand.Shuffle), so a redone formation gives the
//     same groups.
//  4. No groups when end ≠ 0 and round > end (the campaign is over), or
//     when fewer than blind.MinGroup candidates remain. Otherwise G =
//     max(1, candidates/groupSize) groups, candidate i going to group i mod
//     G: groups is G slices of ⌊c/G⌋ or ⌈c/G⌉ entries each, in dealing
//     order (member index = position).
//
// The number grouped is the sum of the groups' lengths (advanceOne's
// reply counted a lone candidate as grouped though it formed no group).
// groupSize must be ≥ 1 (Coordinator.Start enforces ≥ blind.MinGroup);
// FormGroups panics otherwise. entries is not modified; groups share the
// entries' byte slices.
func FormGroups(campaign string, round int32, entries []ActiveEntry, start int32, groupSize, delay int, heuristic bool, end int32) (active int, groups [][]ActiveEntry) {
	if groupSize < 1 {
		panic(fmt.Sprintf("coordinator: FormGroups: group size %d < 1", groupSize))
	}
	sorted := slices.IsSortedFunc(entries, func(a, b ActiveEntry) int { return cmp.Compare(a.ID, b.ID) })
	for i := 1; sorted && i < len(entries); i++ {
		sorted = entries[i].ID != entries[i-1].ID
	}
	if !sorted { // deduplicate keeping the first, sort by ID
		order := make([]int, len(entries))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(entries[a].ID, entries[b].ID), cmp.Compare(a, b)) })
		uniq := make([]ActiveEntry, 0, len(entries))
		for k, i := range order {
			if k > 0 && entries[i].ID == entries[order[k-1]].ID {
				continue
			}
			uniq = append(uniq, entries[i])
		}
		entries = uniq
	}
	active = len(entries)
	d := round + 1
	idx := d - start
	filter := heuristic && delay > 0 && int(idx) > delay
	need := float64(idx-1) / float64(delay)
	cand := make([]int32, 0, len(entries))
	for i := range entries {
		// PDD eq. (5)
		if filter && float64(entries[i].Prior) < need {
			continue
		}
		cand = append(cand, int32(i))
	}
	// the same permutation advanceOne applies to the candidate ids
	seed := sha256.Sum256([]byte(fmt.Sprintf("crowdlog-v1 pdd groups %s %d", campaign, round)))
	rng := mrand.New(mrand.NewChaCha8(seed))
	rng.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
	if end != 0 && round > end {
		cand = nil
	}
	if len(cand) < blind.MinGroup {
		return active, nil
	}
	G := max(1, len(cand)/groupSize)
	groups = make([][]ActiveEntry, G)
	for g := range groups {
		groups[g] = make([]ActiveEntry, 0, (len(cand)+G-1)/G)
	}
	for i, c := range cand {
		groups[i%G] = append(groups[i%G], entries[c])
	}
	return active, groups
}
