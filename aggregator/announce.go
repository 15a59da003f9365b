package aggregator

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// Sealing is what a pipeline definition says its reports are sealed
// with: the Shamir threshold k and the protocol policy (FT_a or FT_u).
type Sealing struct {
	K      int
	Policy star.Policy
}

// admitCounts are one report context's counts (pipelinespec.Counts).
type admitCounts struct {
	admitted int64
	refused  map[string]int64
}

// MaxAnnouncedContexts bounds the report contexts (pipeline, app, epoch)
// a process counts for the announcement: the app and epoch of a refused
// report are the sender's choice, so a sender could otherwise grow the
// map without bound. Reports of further contexts are not counted there
// (their drops still are, in Stats).
const MaxAnnouncedContexts = 1 << 16

// countAdmit is Partition.OnAdmit when the service announces: it counts
// the report by context and outcome.
func (s *Service) countAdmit(c pipelinespec.Context, reason string) {
	s.annMu.Lock()
	defer s.annMu.Unlock()
	if s.admits == nil {
		s.admits = map[pipelinespec.Context]*admitCounts{}
	}
	n := s.admits[c]
	if n == nil {
		if len(s.admits) >= MaxAnnouncedContexts {
			return
		}
		n = &admitCounts{}
		s.admits[c] = n
	}
	if reason == "" {
		n.admitted++
		return
	}
	if n.refused == nil {
		n.refused = map[string]int64{}
	}
	n.refused[reason]++
}

// Announcement is what the service answers on protocol.PipelineSubject
// to req: the canonical texts of Announce and the counts of the report
// context req names (its Context.Key), if its partitions have read any
// since the process started (Partition.OnAdmit) and the context's
// pipeline is one whose counts it discloses (else Withheld: a DP
// definition, or a digest not served). With SignKey, Signed is the
// announcement signed at start and SignedAnswer this answer signed with
// req's nonce and context (pipelinespec.SignedAnswer; one Ed25519
// signature per request, pipelinespec.BenchmarkSignAnswer).
func (s *Service) Announcement(req pipelinespec.Request) pipelinespec.Announcement {
	a := pipelinespec.Announcement{Process: s.process, Signed: s.signedAnnounce}
	for _, sp := range s.Announce {
		a.Pipelines = append(a.Pipelines, sp.Canonical())
	}
	if c, ok := pipelinespec.ParseContextKey(req.Context); ok {
		s.counts(c, req.Context, &a)
	}
	if s.SignKey != nil {
		ans := pipelinespec.SignedAnswer{Process: a.Process, Nonce: req.Nonce, Pipelines: a.Pipelines, Withheld: a.Withheld}
		if len(req.Context) <= pipelinespec.MaxRequest {
			ans.Context = req.Context
			ans.Counts = a.Reports[req.Context]
		}
		// the bounds were checked by SignPipelines at start, the nonce's
		// by ParseRequest, the context's by MaxRequest; the reasons are
		// the aggregator's own: an error here is a bug, and the answer
		// goes unsigned (the client refuses it)
		a.SignedAnswer, _ = pipelinespec.SignAnswer(s.SignKey, ans)
	}
	return a
}

// counts fills a's Reports (under key) or Withheld for report context c.
func (s *Service) counts(c pipelinespec.Context, key string, a *pipelinespec.Announcement) {
	if !s.discloses(c.Pipeline) {
		a.Withheld = true
		return
	}
	s.annMu.Lock()
	defer s.annMu.Unlock()
	if n := s.admits[c]; n != nil {
		k := pipelinespec.Counts{Admitted: n.admitted}
		if len(n.refused) > 0 {
			k.Refused = make(map[string]int64, len(n.refused))
			for r, v := range n.refused {
				k.Refused[r] = v
			}
		}
		a.Reports = map[string]pipelinespec.Counts{key: k}
	}
}

// discloses says whether the announcement may carry the counts of reports
// sealed for digest d: those sealed for no pipeline, and those of a served
// definition with a threshold policy. Never those of a DP definition (an
// exact report count is outside the release's (ε, δ), as the DP releases'
// withheld undecrypted summary), nor of a digest this process does not
// serve (it may be another aggregator group's DP definition).
func (s *Service) discloses(d [32]byte) bool {
	if d == ([32]byte{}) {
		return true
	}
	for _, sp := range s.Announce {
		if sp.Digest() == d {
			return sp.DP == nil
		}
	}
	return false
}

// announce answers every request on protocol.PipelineSubject with
// Announcement until ctx ends (no queue group: each process of the group
// answers for the partitions it owns).
func (s *Service) announce(ctx context.Context, log *slog.Logger) error {
	if s.SignKey != nil {
		b, err := pipelinespec.SignPipelines(s.SignKey, s.process, s.Announce)
		if err != nil {
			return fmt.Errorf("aggregator: sign the pipeline announcement: %w", err)
		}
		s.signedAnnounce = b
	} else {
		log.Warn("aggregator: pipeline announcement unsigned (no " + keydir.AggregatorSignKey + "): clients that pin the aggregator's signing key refuse it; give --sign-key")
	}
	sub, err := s.NATS.Subscribe(protocol.PipelineSubject, func(m *nats.Msg) {
		b, err := json.Marshal(s.Announcement(pipelinespec.ParseRequest(m.Data)))
		if err == nil {
			err = natsconn.Respond(m, b)
		}
		if err != nil {
			log.Warn("aggregator: pipeline announcement not sent", "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("aggregator: subscribe %s (the aggregator's NATS credential must allow it: crowdlog nats-config): %w", protocol.PipelineSubject, err)
	}
	if err := s.NATS.Flush(); err != nil {
		sub.Unsubscribe()
		return fmt.Errorf("aggregator: subscribe %s: %w", protocol.PipelineSubject, err)
	}
	log.Info("aggregator: announcing served pipelines and report counts", "subject", protocol.PipelineSubject, "pipelines", len(s.Announce))
	go func() {
		<-ctx.Done()
		sub.Unsubscribe()
		if s.closeNATS {
			s.NATS.Close()
		}
	}()
	return nil
}

func processID() string { return rand.Text()[:16] }

// PipelineOutcomeAdmitted is the outcome of PipelineReports for a report
// admitted (the others are admit's drop reasons, e.g. "pipeline-mismatch",
// "late", "unknown-epoch").
const PipelineOutcomeAdmitted = "admitted"

// PipelineReports returns the reports this process's partitions admitted
// and refused since it started, summed over apps and epochs, per pipeline
// whose counts Announcement discloses (a served threshold definition, and
// "none" for reports sealed for no pipeline; never a DP definition's, nor
// a digest not served, whose refusals the aggregate
// crowdlog_aggregator_dropped_total counts): keys are
// {pipelinespec.DigestString(digest), outcome}, outcome
// PipelineOutcomeAdmitted or the refusal reason. Every served threshold
// definition is present, admitted 0 until its first report. Counted only
// while the service announces (NATS set), over at most
// MaxAnnouncedContexts report contexts.
func (s *Service) PipelineReports() map[[2]string]int64 {
	out := map[[2]string]int64{}
	for _, sp := range s.Announce {
		if sp.DP == nil {
			out[[2]string{pipelinespec.DigestString(sp.Digest()), PipelineOutcomeAdmitted}] += 0
		}
	}
	s.annMu.Lock()
	defer s.annMu.Unlock()
	for c, n := range s.admits {
		if !s.discloses(c.Pipeline) {
			continue
		}
		d := pipelinespec.DigestString(c.Pipeline)
		out[[2]string{d, PipelineOutcomeAdmitted}] += n.admitted
		for r, v := range n.refused {
			out[[2]string{d, r}] += v
		}
	}
	return out
}
