package prio3

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/crowdlog/crowdlog/protocol/onion"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// pending is a report the leader prepared and awaits the helper's answer on.
type pending struct {
	day      p3.Day
	public   []byte
	sealed   []byte
	state    []byte // the leader's encoded PrepState
	share    []byte // the leader's encoded prep share
	token    []byte // the client's helper token (Report.HelperToken), forwarded
	inFlight bool
}

// Leader is the leader aggregator's state (aggregator id 0).
type Leader struct {
	cfg     Config
	vdaf    *p3.VDAF
	batches map[p3.Day]*batch
	// pending: report id → the prepared reports awaiting the helper (one;
	// more only on the replay control path).
	pending map[p3.ReportID][]*pending
	// collecting: days whose CollectReq went out, awaiting the helper's share.
	collecting map[p3.Day]bool
	// passed: days whose noisy status test passed (statusReleases, drawn
	// once per batch), their shares not yet out; the service keeps them
	// in its state (statusPassed).
	passed map[p3.Day]bool
	Stats  Stats

	// skipReplayCheck disables the report-id uniqueness checks (attack
	// tests' control only).
	skipReplayCheck bool

	// queued: the id of the report the last EventUpload queued, if it
	// queued one (the service maps it to the upload's offset).
	queued    p3.ReportID
	hasQueued bool

	// tokenKeys: the leader-token key of each day seen (derived once)
	tokenKeys map[p3.Day]*token.PrivateKey
}

// lastQueued returns the id of the report the last EventUpload queued,
// or false when it dropped the upload.
func (l *Leader) lastQueued() (p3.ReportID, bool) { return l.queued, l.hasQueued }

// repend queues an upload the leader had queued before a restart again,
// without its checks or counters (they ran when it was first read): the
// same preparation (deterministic), so the helper answers a report it
// already committed idempotently. It returns the report's id.
func (l *Leader) repend(msg []byte) (p3.ReportID, error) {
	r, err := p3.OpenReport(l.cfg.Keys, msg)
	if err != nil {
		return p3.ReportID{}, err
	}
	prep, err := l.vdaf.PrepInit(l.cfg.VerifyKeys[l.cfg.KeyEpoch], r.ID, 0, r.PublicShare, r.LeaderShare)
	if err != nil {
		return p3.ReportID{}, err
	}
	if len(l.pending[r.ID]) > 0 || l.committed(r.Day, r.ID) {
		return r.ID, nil
	}
	l.pending[r.ID] = append(l.pending[r.ID], &pending{day: r.Day, public: bytes.Clone(r.PublicShare), sealed: bytes.Clone(r.SealedHelper), state: prep.State, share: prep.Share, token: bytes.Clone(r.HelperToken)})
	return r.ID, nil
}

// NewLeader returns an empty leader state.
func NewLeader(cfg Config) (*Leader, error) {
	v, err := checkConfig(&cfg)
	if err != nil {
		return nil, err
	}
	if _, ok := cfg.VerifyKeys[cfg.KeyEpoch]; !ok {
		return nil, fmt.Errorf("%w: no verify key for epoch %d", ErrConfig, cfg.KeyEpoch)
	}
	return &Leader{cfg: cfg, vdaf: v, batches: map[p3.Day]*batch{}, pending: map[p3.ReportID][]*pending{}, collecting: map[p3.Day]bool{}}, nil
}

// Apply handles one event: EventUpload, EventTick, EventAggregateResp,
// EventCollect, EventAggShare. It returns the messages to send. Dropped
// reports are counted in Stats.Rejected, not returned as errors; errors
// are for events that cannot be handled (malformed messages wrap
// protocol.ErrMalformed; collection errors ErrBatchOpen, ErrInFlight,
// ErrSmallBatch, ErrRefused).
func (l *Leader) Apply(ev Event) ([]Output, error) {
	switch ev.Kind {
	case EventUpload:
		l.upload(ev)
		return nil, nil
	case EventTick:
		return l.tick()
	case EventAggregateResp:
		return nil, l.aggregateResp(ev)
	case EventCollect:
		return l.collect(ev)
	case EventAggShare:
		return l.aggShare(ev)
	}
	return nil, fmt.Errorf("%w: leader got event %d", ErrWrongRole, ev.Kind)
}

func (l *Leader) committed(day p3.Day, id p3.ReportID) bool {
	if b := l.batches[day]; b != nil {
		_, ok := b.ids[id]
		return ok
	}
	return false
}

func (l *Leader) upload(ev Event) {
	l.hasQueued = false
	l.Stats.Uploads++
	r, err := p3.OpenReport(l.cfg.Keys, ev.Msg)
	if err != nil {
		if errors.Is(err, onion.ErrUnknownKey) {
			l.Stats.reject("unknown_key")
		} else {
			l.Stats.reject("malformed")
		}
		return
	}
	if r.Campaign != l.cfg.Campaign {
		l.Stats.reject("campaign")
		return
	}
	if closed(&l.cfg, r.Day, ev.Now) || l.collecting[r.Day] {
		l.Stats.reject("late")
		return
	}
	if future(r.Day, ev.Now) {
		l.Stats.reject("future")
		return
	}
	if l.refuseLeaderToken(r) { // leadertoken.go
		return
	}
	if !l.skipReplayCheck && (len(l.pending[r.ID]) > 0 || l.committed(r.Day, r.ID)) {
		l.Stats.reject("replay")
		return
	}
	prep, err := l.vdaf.PrepInit(l.cfg.VerifyKeys[l.cfg.KeyEpoch], r.ID, 0, r.PublicShare, r.LeaderShare)
	if err != nil {
		l.Stats.reject(p3.Reason(err))
		return
	}
	// copies: the parsed fields alias the whole opened upload (654 KB at
	// L = 10,000, b = 4), which must not stay alive while the report waits
	l.pending[r.ID] = append(l.pending[r.ID], &pending{day: r.Day, public: bytes.Clone(r.PublicShare), sealed: bytes.Clone(r.SealedHelper), state: prep.State, share: prep.Share, token: bytes.Clone(r.HelperToken)})
	l.queued, l.hasQueued = r.ID, true
}

// Days returns the days the leader holds reports of, committed or in
// preparation, in ascending order: the batches a service may collect once
// closed.
func (l *Leader) Days() []p3.Day {
	seen := map[p3.Day]bool{}
	for d := range l.batches {
		seen[d] = true
	}
	for _, ps := range l.pending {
		for _, p := range ps {
			seen[p.day] = true
		}
	}
	return sortedDays(seen)
}

// itemSize is the encoded size of one PrepItem in an AggregateReq.
func itemSize(p *pending) int {
	return p3.NonceSize + 14 + len(p.public) + len(p.sealed) + len(p.share) + len(p.token)
}

// tick sends every queued report: per day (in order, ids in order),
// AggregateReqs of at most p3.MaxItems reports and Config.MaxRequestBytes
// encoded bytes each.
func (l *Leader) tick() ([]Output, error) {
	type slot struct {
		id p3.ReportID
		p  *pending
	}
	byDay := map[p3.Day][]slot{}
	for id, ps := range l.pending {
		for _, p := range ps {
			if !p.inFlight {
				byDay[p.day] = append(byDay[p.day], slot{id, p})
			}
		}
	}
	days := make([]p3.Day, 0, len(byDay))
	for d := range byDay {
		days = append(days, d)
	}
	sort.Slice(days, func(i, j int) bool { return days[i] < days[j] })
	limit := l.cfg.MaxRequestBytes
	if limit <= 0 {
		limit = DefaultMaxRequestBytes
	}
	// version, type, campaign, day, key epoch, item count, and the
	// signature envelope the service wraps it in (p3.SignedReq)
	head := 2 + 1 + len(l.cfg.Campaign) + 12 + p3.SignedReqOverhead
	var out []Output
	for _, d := range days {
		s := byDay[d]
		sort.SliceStable(s, func(i, j int) bool { return string(s[i].id[:]) < string(s[j].id[:]) })
		for len(s) > 0 {
			n, size := 0, head
			for n < len(s) && n < p3.MaxItems && (n == 0 || size+itemSize(s[n].p) <= limit) {
				size += itemSize(s[n].p)
				n++
			}
			q := &p3.AggregateReq{Campaign: l.cfg.Campaign, Day: d, KeyEpoch: l.cfg.KeyEpoch}
			for _, x := range s[:n] {
				q.Items = append(q.Items, p3.PrepItem{ID: x.id, PublicShare: x.p.public, SealedHelper: x.p.sealed, LeaderPrep: x.p.share, HelperToken: x.p.token})
				x.p.inFlight = true
			}
			s = s[n:]
			b, err := q.MarshalBinary()
			if err != nil {
				return out, err
			}
			out = append(out, Output{To: ToHelper, Msg: b})
		}
	}
	return out, nil
}

// forget drops the state of day's batch (its aggregate, report ids and
// pending reports) once expired at now; it reports whether it did. The
// service calls it only for batches collected or refused.
func (l *Leader) forget(day p3.Day, now time.Time) bool {
	if !expired(&l.cfg, day, now) {
		return false
	}
	delete(l.batches, day)
	delete(l.collecting, day)
	delete(l.passed, day)
	for id, ps := range l.pending {
		kept := ps[:0]
		for _, p := range ps {
			if p.day != day {
				kept = append(kept, p)
			}
		}
		if len(kept) == 0 {
			delete(l.pending, id)
		} else {
			l.pending[id] = kept
		}
	}
	return true
}

// requeue puts the reports of AggregateReq req that are still in flight
// back in the queue (the next tick sends them again) and returns how many:
// those a response left out. Committed reports are no longer pending and
// are not touched; the helper answers a re-sent committed report
// idempotently.
func (l *Leader) requeue(req []byte) int {
	q, err := p3.ParseAggregateReq(req)
	if err != nil {
		return 0
	}
	n := 0
	for _, it := range q.Items {
		for _, p := range l.pending[it.ID] {
			if p.inFlight && p.day == q.Day {
				p.inFlight = false
				n++
			}
		}
	}
	return n
}

// aggregateResp commits the reports the helper prepared and counts the
// ones it rejected under "helper_<reason>".
func (l *Leader) aggregateResp(ev Event) error {
	resp, err := p3.ParseAggregateResp(ev.Msg)
	if err != nil {
		return err
	}
	if resp.Campaign != l.cfg.Campaign {
		return fmt.Errorf("prio3: aggregate response for campaign %q, this leader runs %q", resp.Campaign, l.cfg.Campaign)
	}
	for _, res := range resp.Results {
		ps := l.pending[res.ID]
		i := 0
		for i < len(ps) && !(ps[i].inFlight && ps[i].day == resp.Day) {
			i++
		}
		if i == len(ps) {
			l.Stats.reject("unknown_report")
			continue
		}
		p := ps[i]
		if ps = append(ps[:i:i], ps[i+1:]...); len(ps) == 0 {
			delete(l.pending, res.ID)
		} else {
			l.pending[res.ID] = ps
		}
		if res.Reason != "" {
			l.Stats.reject("helper_" + res.Reason)
			continue
		}
		out, err := l.vdaf.PrepNext(p.state, res.Message)
		if err != nil {
			l.Stats.reject(p3.Reason(err))
			continue
		}
		b := l.batches[p.day]
		if b == nil {
			b = newBatch(l.vdaf)
			l.batches[p.day] = b
		}
		if _, dup := b.ids[res.ID]; dup && !l.skipReplayCheck {
			l.Stats.reject("replay")
			continue
		}
		b.add(l.vdaf, res.ID, out, digest{})
		l.Stats.Prepared++
	}
	return nil
}

// markPassed records that day passed its status test (status.go).
func (l *Leader) markPassed(day p3.Day) {
	if l.passed == nil {
		l.passed = map[p3.Day]bool{}
	}
	l.passed[day] = true
}

// collect starts collection of batch ev.Day: closed, nothing in
// preparation, at least MinBatchSize reports and, with StatusEpsilon > 0,
// a noisy count that passed the status test (status.go; decided once per
// batch). It sends the leader's count
// and checksum to the helper; the leader's own share goes to the collector
// with the helper's (aggShare).
func (l *Leader) collect(ev Event) ([]Output, error) {
	if !closed(&l.cfg, ev.Day, ev.Now) {
		return nil, fmt.Errorf("%w: %s", ErrBatchOpen, ev.Day)
	}
	for _, ps := range l.pending {
		for _, p := range ps {
			if p.day == ev.Day {
				return nil, fmt.Errorf("%w: %s", ErrInFlight, ev.Day)
			}
		}
	}
	b := l.batches[ev.Day]
	if b == nil {
		b = newBatch(l.vdaf)
	}
	if !l.passed[ev.Day] {
		// the day's status, decided once (status.go): the exact minimum,
		// and with StatusEpsilon > 0 a noisy count above it
		ok, err := statusReleases(&l.cfg, b.count)
		if err != nil {
			return nil, err
		}
		if !ok {
			l.Stats.refuse("small_batch")
			if b.count < l.cfg.MinBatchSize {
				return nil, fmt.Errorf("%w: %s has %d reports, the minimum is %d", ErrSmallBatch, ev.Day, b.count, l.cfg.MinBatchSize)
			}
			return nil, fmt.Errorf("%w: %s failed the noisy status test (ε_c %g, δ %g: a noisy count under %d + %d)", ErrSmallBatch, ev.Day,
				l.cfg.StatusEpsilon, l.cfg.StatusDelta, l.cfg.MinBatchSize, StatusThreshold(l.cfg.StatusEpsilon, l.cfg.StatusDelta))
		}
		l.markPassed(ev.Day)
	}
	q := &p3.CollectReq{Campaign: l.cfg.Campaign, Day: ev.Day, Count: b.count, Checksum: b.checksum}
	msg, err := q.MarshalBinary()
	if err != nil {
		return nil, err
	}
	l.collecting[ev.Day] = true
	return []Output{{To: ToHelper, Msg: msg}}, nil
}

// aggShare forwards the helper's sealed share with the leader's own to the
// collector, or reports the helper's refusal.
func (l *Leader) aggShare(ev Event) ([]Output, error) {
	a, err := p3.ParseAggShare(ev.Msg)
	if err != nil {
		return nil, err
	}
	if a.Role != 1 || a.Campaign != l.cfg.Campaign || !l.collecting[a.Day] {
		return nil, fmt.Errorf("prio3: unexpected aggregate share (role %d, campaign %q, day %s)", a.Role, a.Campaign, a.Day)
	}
	if a.Reason != "" {
		l.Stats.refuse("helper_" + a.Reason)
		return nil, fmt.Errorf("%w: %s: %s", ErrRefused, a.Day, a.Reason)
	}
	b := l.batches[a.Day]
	mine, err := sealShare(&l.cfg, 0, a.Day, b)
	if err != nil {
		return nil, err
	}
	l.Stats.Collected++
	b.markCollected()
	return []Output{{To: ToCollector, Msg: mine}, {To: ToCollector, Msg: ev.Msg}}, nil
}
