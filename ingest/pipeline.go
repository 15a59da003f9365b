package ingest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// ErrPipelineMismatch is wrapped by New's error when the device's
// configuration disagrees with every pipeline the aggregators announce for
// Config.App: its reports would be dropped (pipeline-mismatch) or never
// reach k. The error names the disagreeing value and the Config field to
// set.
var ErrPipelineMismatch = errors.New("the device's configuration disagrees with the pipeline the aggregator serves")

// ErrNoAnnouncement is wrapped by New's and Device.Downstream's error when
// no aggregator answered on protocol.PipelineSubject within
// Config.PipelineWait.
var ErrNoAnnouncement = errors.New("no aggregator announced its pipelines")

// DefaultPipelineWait is Config.PipelineWait's default: how long to wait
// for the first aggregator's answer (later ones get 250 ms more). It costs
// only when no aggregator answers; 3 s was too short on a loaded machine.
const DefaultPipelineWait = 10 * time.Second

// announcements asks every aggregator process on protocol.PipelineSubject
// for its pipelines and the counts of report context key (pipelinespec.
// Context.Key; "": none) and returns the answers heard within wait of the request, at most 250 ms
// after the first (one per process, pipelinespec.Announcement), with the
// parsed pipelines of each. Errors: none heard (ErrNoAnnouncement), a
// malformed answer.
//
// With signPub, the request carries a fresh random nonce
// (pipelinespec.NonceSize bytes) and an answer counts only when its
// SignedAnswer verifies under signPub and echoes that nonce and key; its
// process id, pipelines and counts are then the signed ones. The others
// are refused and counted (logged with log): when no answer remains, the
// error wraps ErrAnnouncementStale if some were signed by signPub for
// another request (a replay, or an aggregator that signs only at its
// start), else ErrAnnouncementSignature.
func announcements(ctx context.Context, nc *nats.Conn, wait time.Duration, key string, signPub ed25519.PublicKey, log *slog.Logger) ([]pipelinespec.Announcement, [][]pipelinespec.Spec, error) {
	if wait <= 0 {
		wait = DefaultPipelineWait
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, nil, fmt.Errorf("ingest: pipeline announcement: %w", err)
	}
	defer sub.Unsubscribe()
	var nonce []byte
	if signPub != nil {
		nonce = make([]byte, pipelinespec.NonceSize)
		rand.Read(nonce)
	}
	req, _ := json.Marshal(pipelinespec.Request{Context: key, Nonce: nonce})
	if err := nc.PublishRequest(protocol.PipelineSubject, inbox, req); err != nil {
		return nil, nil, fmt.Errorf("ingest: pipeline announcement: %w", err)
	}
	deadline := time.Now().Add(wait)
	var anns []pipelinespec.Announcement
	var specs [][]pipelinespec.Spec
	seen := map[string]bool{}
	refused, stale := 0, 0
	for {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		wctx, cancel := context.WithTimeout(ctx, left)
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("ingest: pipeline announcement: %w", ctx.Err())
			}
			break
		}
		a, s, err := pipelinespec.ParseAnnouncement(m.Data)
		if err != nil && signPub == nil {
			return nil, nil, fmt.Errorf("ingest: pipeline announcement: %w", err)
		}
		if signPub != nil {
			var ans *pipelinespec.SignedAnswer
			if err == nil {
				ans, err = verifyAnswer(a, signPub, nonce, key)
			}
			if errors.Is(err, errStaleAnswer) {
				stale++
				log.Warn("device: pipeline announcement refused: signed by the aggregator key, but not for this request (a replay, or an aggregator older than the client)",
					"key", AggregatorSignKeyFile, "stale", stale, "err", err)
				continue
			}
			if err != nil {
				refused++
				log.Warn("device: pipeline announcement refused: not signed by the pinned aggregator key", "key", AggregatorSignKeyFile, "refused", refused, "err", err)
				continue
			}
			a.Process, a.Pipelines, s = ans.Process, ans.Pipelines, ans.Specs
			a.Withheld, a.Reports = ans.Withheld, nil
			if key != "" {
				a.Reports = map[string]pipelinespec.Counts{key: ans.Counts}
			}
		}
		if seen[a.Process] {
			continue
		}
		seen[a.Process] = true
		anns, specs = append(anns, a), append(specs, s)
		if len(anns) == 1 {
			if d := time.Now().Add(250 * time.Millisecond); d.Before(deadline) {
				deadline = d
			}
		}
	}
	if len(anns) == 0 && stale > 0 {
		return nil, nil, fmt.Errorf("ingest: %w: %d answers on %s within %s signed by the aggregator operator's key pinned from %s, none for this request's nonce (%d more not signed by it): do not send; an aggregator of an older release signs only at its start (upgrade it), otherwise someone replays recorded answers in its place",
			ErrAnnouncementStale, stale, protocol.PipelineSubject, wait, AggregatorSignKeyFile, refused)
	}
	if len(anns) == 0 && refused > 0 {
		return nil, nil, fmt.Errorf("ingest: %w: %d answers on %s within %s, none signed by the aggregator operator's key pinned from %s (Config.KeysDir, Config.Fingerprints): do not send; if the aggregator runs without its signing key, its operator gives `crowdlog aggregate` --sign-key; otherwise someone else answers in its place",
			ErrAnnouncementSignature, refused, protocol.PipelineSubject, wait, AggregatorSignKeyFile)
	}
	if len(anns) == 0 {
		return nil, nil, fmt.Errorf("ingest: %w on %s within %s: start `crowdlog aggregate` with --nats (and its --pipeline), check that the client's NATS credential may publish to %s, raise Config.PipelineWait, or leave Config.App empty to send unchecked",
			ErrNoAnnouncement, protocol.PipelineSubject, wait, protocol.PipelineSubject)
	}
	return anns, specs, nil
}

// errStaleAnswer marks verifyAnswer's refusal of an answer signed by the
// pinned key for another request.
var errStaleAnswer = errors.New("signed for another request")

// verifyAnswer returns a's SignedAnswer when it verifies under signPub
// and answers the request of nonce and key. Errors: errStaleAnswer when
// it verifies but answers another request, or when a has only the
// Signed announcement of its start and that verifies; else the reason
// (absent, malformed, pipelinespec.ErrSignature).
func verifyAnswer(a pipelinespec.Announcement, signPub ed25519.PublicKey, nonce []byte, key string) (*pipelinespec.SignedAnswer, error) {
	if len(a.SignedAnswer) == 0 {
		if len(a.Signed) == 0 {
			return nil, errors.New("unsigned")
		}
		sp, err := pipelinespec.ParseSignedPipelines(a.Signed)
		if err != nil {
			return nil, err
		}
		if err := sp.Verify(signPub); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: only the announcement signed at the process's start", errStaleAnswer)
	}
	ans, err := pipelinespec.ParseSignedAnswer(a.SignedAnswer)
	if err != nil {
		return nil, err
	}
	if err := ans.Verify(signPub); err != nil {
		return nil, err
	}
	if !ans.Answers(nonce, key) {
		return nil, fmt.Errorf("%w: it echoes nonce %x… and context %q", errStaleAnswer, ans.Nonce[:min(4, len(ans.Nonce))], ans.Context)
	}
	return ans, nil
}

// verifyPipeline checks cfg against the pipelines the aggregators serve
// (Config.App): it returns the digest the device seals App's reports
// with. Every announced definition of App is compared with Config.K,
// Config.Policy, Config.AppOptions and, when set, Config.Pipelines[App];
// exactly one must agree, and every process that names definitions must
// serve it. Aggregators that serve every definition (no --pipeline)
// leave Config.Pipelines[App] as given (logged).
func verifyPipeline(ctx context.Context, nc *nats.Conn, cfg Config, signPub ed25519.PublicKey, log *slog.Logger) ([32]byte, error) {
	want, given := cfg.Pipelines[cfg.App]
	a, err := apps.LookupWith(cfg.App, cfg.AppOptions)
	if err != nil {
		return [32]byte{}, fmt.Errorf("ingest: Config.App %q: %w", cfg.App, err)
	}
	meaning := apps.Meaning(a)
	_, specs, err := announcements(ctx, nc, cfg.PipelineWait, "", signPub, log)
	if err != nil {
		return [32]byte{}, err
	}
	var all []pipelinespec.Spec
	open := 0 // processes that serve every definition
	for _, s := range specs {
		if len(s) == 0 {
			open++
		}
		all = append(all, s...)
	}
	if len(all) == 0 {
		log.Warn("device: the aggregators serve every pipeline definition (started without --pipeline): Config.K, Policy and Pipelines not checked against them",
			"app", cfg.App, "processes", open)
		return want, nil
	}
	var ofApp []pipelinespec.Spec
	var served []string
	for _, s := range all {
		if s.App == cfg.App {
			ofApp = append(ofApp, s)
		}
		if !slices.Contains(served, s.App) {
			served = append(served, s.App)
		}
	}
	if len(ofApp) == 0 {
		return [32]byte{}, fmt.Errorf("ingest: %w: Config.App %q: the aggregators serve pipelines of %s only: set Config.App to one of them (or start an aggregator with a pipeline of %q)",
			ErrPipelineMismatch, cfg.App, strings.Join(served, ", "), cfg.App)
	}
	// the first disagreeing value of s, as the error names it; "" agrees
	disagree := func(s pipelinespec.Spec) string {
		d := s.Digest()
		switch {
		case given && d != want:
			return fmt.Sprintf("Config.Pipelines[%q] = %s, the aggregator serves digest %s: set Config.Pipelines[%q] to it (or delete the entry to adopt the announced digest)",
				cfg.App, pipelinespec.DigestString(want), pipelinespec.DigestString(d), cfg.App)
		case s.ShamirK != cfg.K:
			return fmt.Sprintf("Config.K = %d, the aggregator's pipeline %s has k = %d: set Config.K to %d",
				cfg.K, pipelinespec.DigestString(d)[:12], s.ShamirK, s.ShamirK)
		case s.Sealing() != cfg.Policy:
			return fmt.Sprintf("Config.Policy = %s, the aggregator's pipeline %s (policy %s) seals as %s: set Config.Policy to star.%s",
				cfg.Policy, pipelinespec.DigestString(d)[:12], s.Policy, s.Sealing(), policyName(s.Sealing()))
		case s.Options != meaning:
			return fmt.Sprintf("Config.AppOptions give %q, the aggregator's pipeline %s has options %q: set Config.AppOptions to match",
				meaning, pipelinespec.DigestString(d)[:12], s.Options)
		}
		return ""
	}
	var match []pipelinespec.Spec
	var why []string
	for _, s := range ofApp {
		if w := disagree(s); w != "" {
			why = append(why, w)
			continue
		}
		match = append(match, s)
	}
	switch {
	case len(match) == 0:
		return [32]byte{}, fmt.Errorf("ingest: %w (app %q): %s", ErrPipelineMismatch, cfg.App, strings.Join(why, "; "))
	case len(match) > 1 && !sameDigest(match):
		return [32]byte{}, fmt.Errorf("ingest: %w: %d pipelines of app %q agree with Config.K and Policy: set Config.Pipelines[%q] to the digest of the one to send for",
			ErrPipelineMismatch, len(match), cfg.App, cfg.App)
	}
	d := match[0].Digest()
	for i, s := range specs {
		if len(s) > 0 && !servesDigest(s, d) {
			return [32]byte{}, fmt.Errorf("ingest: %w: aggregator process %d of %d does not serve pipeline %s (app %q, k %d) that another does: ask the operator to give every aggregator the same --pipeline files",
				ErrPipelineMismatch, i+1, len(specs), pipelinespec.DigestString(d), cfg.App, cfg.K)
		}
	}
	log.Info("device: pipeline verified against the aggregators' announcement", "app", cfg.App, "pipeline", pipelinespec.DigestString(d),
		"policy", match[0].Policy, "k", match[0].ShamirK, "processes", len(specs))
	return d, nil
}

func sameDigest(ss []pipelinespec.Spec) bool {
	for _, s := range ss[1:] {
		if s.Digest() != ss[0].Digest() {
			return false
		}
	}
	return true
}

func servesDigest(ss []pipelinespec.Spec, d [32]byte) bool {
	for _, s := range ss {
		if s.Digest() == d {
			return true
		}
	}
	return false
}

func policyName(p star.Policy) string {
	if p == star.FTa {
		return "FTa"
	}
	return "FTu"
}

// Downstream is what the aggregators did with the reports of one
// (pipeline, app, epoch), summed over the processes that answered
// (pipelinespec.Announcement): counts over every device that sends in
// that context, not this device's alone (an aggregator cannot tell
// devices apart, by design). Device.Downstream of a device with
// Config.App sums only counts signed by the pinned aggregator key for
// its request (pipelinespec.SignedAnswer); FetchDownstream's are
// unverified. The device decides nothing on them: they are for the
// caller to show.
type Downstream struct {
	Pipeline  [32]byte         // the digest reports were sealed for (zero: none)
	App       string           // the app ("query", "click", …) the counts are for
	Epoch     string           // the epoch the counts are for
	Processes int              // aggregator processes that answered
	Admitted  int64            // reports admitted (pipeline served, epoch open, token valid)
	Refused   map[string]int64 // reports refused, by the aggregator's drop reason (pipeline-mismatch, unknown-epoch, late, no-token, …)
	// Withheld is true when an aggregator did not disclose the counts:
	// the pipeline is a DP definition (an exact report count is outside
	// its (ε, δ)) or one it does not serve. The counts above then leave
	// that aggregator out.
	Withheld bool
}

// RefusedTotal is the sum of Refused.
func (d Downstream) RefusedTotal() int64 {
	var n int64
	for _, v := range d.Refused {
		n += v
	}
	return n
}

// String is d as one line: "admitted A, refused R (reason n, …) by P
// aggregator processes".
func (d Downstream) String() string {
	if d.Withheld {
		return fmt.Sprintf("counts withheld by the aggregators (a DP pipeline, or one they do not serve; %d processes)", d.Processes)
	}
	var rs []string
	for r, n := range d.Refused {
		rs = append(rs, fmt.Sprintf("%s %d", r, n))
	}
	s := fmt.Sprintf("admitted %d, refused %d", d.Admitted, d.RefusedTotal())
	if len(rs) > 0 {
		s += " (" + strings.Join(rs, ", ") + ")"
	}
	return s + fmt.Sprintf(" by %d aggregator processes", d.Processes)
}

// Downstream asks the aggregators (protocol.PipelineSubject, waiting up
// to Config.PipelineWait) how many reports of app in the device's epoch,
// sealed for the device's pipeline digest of app, they admitted and
// refused so far; Downstream.Withheld for a DP pipeline's reports. Reports pass the relays' pools first, so counts grow
// for a while after Submit returns. With Config.App the answers are
// verified as New verifies them. Errors: the device has no NATS
// connection of its own or given (a replay's device), no aggregator
// answered (ErrNoAnnouncement: start it with --nats), none signed for
// this request (ErrAnnouncementSignature, ErrAnnouncementStale), ctx
// ended.
func (d *Device) Downstream(ctx context.Context, app string) (Downstream, error) {
	if d.conn == nil {
		return Downstream{}, errors.New("ingest: Downstream: the device has no NATS connection")
	}
	return fetchDownstream(ctx, d.conn, d.wait, d.pipelines[app], app, d.epoch, d.signPub, d.log)
}

// FetchDownstream asks the aggregators on nc (protocol.PipelineSubject,
// waiting up to wait; 0 = DefaultPipelineWait) how many reports of app in
// epoch, sealed for pipeline digest, they admitted and refused so far, as
// Device.Downstream does for a device; for callers that replay many users
// over one connection (ingest.Replay). Errors: no aggregator answered
// (ErrNoAnnouncement: start it with --nats), ctx ended.
func FetchDownstream(ctx context.Context, nc *nats.Conn, wait time.Duration, pipeline [32]byte, app, epoch string) (Downstream, error) {
	return fetchDownstream(ctx, nc, wait, pipeline, app, epoch, nil, slog.Default())
}

func fetchDownstream(ctx context.Context, nc *nats.Conn, wait time.Duration, pipeline [32]byte, app, epoch string, signPub ed25519.PublicKey, log *slog.Logger) (Downstream, error) {
	c := pipelinespec.Context{Pipeline: pipeline, App: app, Epoch: epoch}
	anns, _, err := announcements(ctx, nc, wait, c.Key(), signPub, log)
	if err != nil {
		return Downstream{}, err
	}
	out := Downstream{Pipeline: c.Pipeline, App: app, Epoch: epoch, Processes: len(anns), Refused: map[string]int64{}}
	for _, a := range anns {
		out.Withheld = out.Withheld || a.Withheld
		n := a.Reports[c.Key()]
		out.Admitted += n.Admitted
		for r, v := range n.Refused {
			out.Refused[r] += v
		}
	}
	return out, nil
}
