package runner

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/aggregator/vectors"
	"github.com/crowdlog/crowdlog/coordinator"
	"github.com/crowdlog/crowdlog/infra/metrics"
	"github.com/crowdlog/crowdlog/ingest/oprfclient"
	"github.com/crowdlog/crowdlog/ingest/publish"
	"github.com/crowdlog/crowdlog/ingest/tokenclient"
	"github.com/crowdlog/crowdlog/randomness"
	pddrelease "github.com/crowdlog/crowdlog/release/pdd"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/release/stage"
)

// ExactCountMetrics are the series that carry the exact counts a DP
// release withholds (docs/threat-model.md, "Whoever reads /metrics"):
// they move with the number of reports of each artifact (a group that
// reaches k adds its k reports at once; pending tags are the artifacts
// below k; the decrypted topic's offsets count decrypted reports). A role
// registers them only when exact is set (ExactCounts).
var ExactCountMetrics = []string{
	"crowdlog_aggregator_decrypted_total",
	"crowdlog_aggregator_pending_tags",
	"crowdlog_aggregator_decrypt_wait_seconds",
	"crowdlog_release_consumer_lag",
	"crowdlog_release_foreign_items_total",
}

// ExactCounts reports whether a role serving the pipelines of
// pipelineFiles exports ExactCountMetrics: with optIn (the role's
// --metrics-exact-counts), or when it serves at least one pipeline and
// every one has a threshold policy (ft-a, ft-u), whose release publishes
// exact counts anyway. An aggregator without --pipeline serves every
// definition, DP ones included: it does not. Errors of a file are
// config.UsageError.
func ExactCounts(optIn bool, pipelineFiles []string) (bool, error) {
	if optIn {
		return true, nil
	}
	for _, f := range pipelineFiles {
		p, err := loadPipelineFile(f)
		if err != nil {
			return false, err
		}
		if kind, err := policy.Parse(p.Policy.Kind); err != nil || kind.IsDP() {
			return false, nil
		}
	}
	return len(pipelineFiles) > 0, nil
}

// RegisterAggregator exposes an aggregator's counters: reports accepted
// and dropped (all reasons, incl. redelivered duplicates); the consumer
// lag per owned partition of the reports topic; the batch apply time
// histogram (seconds); the reports admitted and refused per served
// threshold pipeline (aggregator.Service.PipelineReports); and, with exact
// (ExactCounts), reports decrypted,
// undecrypted tags pending in the partitions this process owns and the
// sampled decrypt wait histogram (seconds).
func RegisterAggregator(reg prometheus.Registerer, s *aggregator.Service, exact bool) {
	hs := s.Histograms() // apply, decrypt wait
	if !exact {
		hs = hs[:1]
	}
	metrics.Collect(reg, hs...)
	metrics.GaugeMapFunc(reg, "crowdlog_aggregator_consumer_lag", "Messages of the reports topic behind the partition's end (high watermark − next offset) at the last fetch, per partition this process owns.",
		"partition", func() map[string]float64 { return lagMap(s.ConsumerLag()) })
	metrics.CounterFunc(reg, "crowdlog_aggregator_reports_total", "Reports accepted by the aggregator.", nil, func() float64 { return float64(s.Reports.Load()) })
	if exact {
		metrics.CounterFunc(reg, "crowdlog_aggregator_decrypted_total", "Reports decrypted and emitted.", nil, func() float64 { return float64(s.Decrypted.Load()) })
		metrics.GaugeFunc(reg, "crowdlog_aggregator_pending_tags", "Undecrypted tags in the partitions this process owns.", nil, func() float64 { return float64(s.PendingTags()) })
	}
	metrics.CounterFunc(reg, "crowdlog_aggregator_tokens_spent_total", "Report tokens verified and recorded as spent (aggregate --keys; stays 0 with token checks off).", nil, func() float64 { return float64(s.TokensSpent.Load()) })
	metrics.CounterMapFunc(reg, "crowdlog_aggregator_dropped_total", "Reports and messages dropped, by reason (docs/operations.md): malformed, duplicate, late, unknown-epoch, epoch-full, bad-share, bad-ciphertext, bad-commitment, no-token, bad-token, spent-token, token-key, bad-presentation, arc-key, unit-mismatch, ...",
		"reason", aggregator.DropReasons, func() map[string]float64 {
			out := map[string]float64{}
			for r, n := range s.DroppedByReason() {
				out[r] = float64(n)
			}
			return out
		})
	reg.MustRegister(pipelineReports{s})
	metrics.CounterFunc(reg, "crowdlog_aggregator_snapshots_total", "Partition snapshots written (--snapshot-dir).", nil, func() float64 { return float64(s.Snapshots.Load()) })
	metrics.CounterFunc(reg, "crowdlog_aggregator_restores_total", "Partitions restored from a snapshot instead of replayed from the epoch's start.", nil, func() float64 { return float64(s.Restores.Load()) })
}

// pipelineReportsDesc describes crowdlog_aggregator_pipeline_reports_total.
var pipelineReportsDesc = prometheus.NewDesc("crowdlog_aggregator_pipeline_reports_total",
	"Reports admitted (outcome admitted) and refused (outcome: the drop reason, e.g. pipeline-mismatch, late, unknown-epoch) per served threshold pipeline (its digest; none: sealed for no pipeline), as announced on crowdlog.pipeline; DP pipelines are never counted here. Only with aggregate --nats.",
	[]string{"pipeline", "outcome"}, nil)

// pipelineReports exposes aggregator.Service.PipelineReports.
type pipelineReports struct{ s *aggregator.Service }

func (c pipelineReports) Describe(ch chan<- *prometheus.Desc) { ch <- pipelineReportsDesc }

func (c pipelineReports) Collect(ch chan<- prometheus.Metric) {
	for k, n := range c.s.PipelineReports() {
		ch <- prometheus.MustNewConstMetric(pipelineReportsDesc, prometheus.CounterValue, float64(n), k[0], k[1])
	}
}

// RegisterRandomness exposes OPRF elements evaluated and requests rejected.
func RegisterRandomness(reg prometheus.Registerer, s *randomness.Service) {
	metrics.CounterFunc(reg, "crowdlog_randomness_evaluated_total", "OPRF elements evaluated.", nil, func() float64 { return float64(s.Evaluated.Load()) })
	metrics.CounterFunc(reg, "crowdlog_randomness_rejected_total", "Randomness requests refused (malformed, closed epoch).", nil, func() float64 { return float64(s.Rejected.Load()) })
	// with --require-tokens: requests refused for their tokens, by reason
	for _, reason := range []string{randomness.ReasonTokensMissing, randomness.ReasonTokenInvalid, randomness.ReasonTokenSpent, randomness.ReasonTokensUnavailable,
		randomness.ReasonReplySubject} {
		metrics.CounterFunc(reg, "crowdlog_randomness_token_refused_total", "Randomness requests refused for their Privacy Pass tokens, by reason.",
			prometheus.Labels{"reason": reason}, func() float64 { return float64(s.Refusals()[reason]) })
	}
}

// RegisterRelease exposes epochs released and item rows written, the
// write time histogram (seconds) and the last release's Unix time per
// (app, policy, k); with exact (ExactCounts), also the consumer lag per
// partition of the decrypted topic and the decrypted items sealed for
// another pipeline.
func RegisterRelease(reg prometheus.Registerer, st *stage.Stage, exact bool) {
	metrics.Collect(reg, st.Collectors()...)
	if exact {
		metrics.GaugeMapFunc(reg, "crowdlog_release_consumer_lag", "Messages of the decrypted topic behind the partition's end (high watermark − next offset) at the last read, per partition.",
			"partition", func() map[string]float64 { return lagMap(st.ConsumerLag()) })
		metrics.CounterFunc(reg, "crowdlog_release_foreign_items_total", "Decrypted items not released: sealed for another pipeline (policy, k) than this stage's.", nil, func() float64 { return float64(st.Foreign.Load()) })
	}
	metrics.CounterFunc(reg, "crowdlog_release_epochs_total", "Epoch releases written to ClickHouse.", nil, func() float64 { return float64(st.Released.Load()) })
	metrics.CounterFunc(reg, "crowdlog_release_rows_total", "Released item rows written to ClickHouse.", nil, func() float64 { return float64(st.Rows.Load()) })
}

// lagMap is a consumer lag per partition as GaugeMapFunc takes it.
func lagMap(lag map[int]int64) map[string]float64 {
	out := make(map[string]float64, len(lag))
	for p, n := range lag {
		out[strconv.Itoa(p)] = float64(n)
	}
	return out
}

// RegisterPublisher exposes a client publisher's reports published and
// retried, its PubAck latency, and the process's OPRF round trips
// (oprfclient.RoundTripSeconds: the clients that the role's publisher
// sends for) and their requests re-sent to token issuers
// (tokenclient.Retries).
func RegisterPublisher(reg prometheus.Registerer, p *publish.Publisher) {
	metrics.Collect(reg, p.AckSeconds())
	metrics.Collect(reg, oprfclient.Collectors()...)
	metrics.Collect(reg, tokenclient.Collectors()...)
	metrics.CounterFunc(reg, "crowdlog_ingest_reports_published_total", "Onion-wrapped reports stored by relay a's stream.", nil, func() float64 { return float64(p.Published.Load()) })
	metrics.CounterFunc(reg, "crowdlog_ingest_publish_retries_total", "Publishes retried (backpressure or timeouts).", nil, func() float64 { return float64(p.Retried.Load()) })
	metrics.CounterFunc(reg, "crowdlog_ingest_publish_failed_total", "Reports abandoned at Close.", nil, func() float64 { return float64(p.Failed.Load()) })
}

// RegisterVectors exposes the PDD aggregator's counters: blinded vectors and
// recovery answers accepted, group outcomes written, messages dropped, and
// open groups in the partitions this process owns.
func RegisterVectors(reg prometheus.Registerer, s *vectors.Service) {
	metrics.CounterFunc(reg, "crowdlog_vectors_submissions_total", "Blinded vectors summed.", nil, func() float64 { return float64(s.Submissions.Load()) })
	metrics.CounterFunc(reg, "crowdlog_vectors_answers_total", "Recovery answers accepted.", nil, func() float64 { return float64(s.Answers.Load()) })
	metrics.CounterFunc(reg, "crowdlog_vectors_outcomes_total", "Group outcomes (complete, recovered, lost) written.", nil, func() float64 { return float64(s.Outcomes.Load()) })
	metrics.CounterFunc(reg, "crowdlog_vectors_dropped_total", "Messages dropped: malformed, unknown group, late, duplicate, unsolicited.", nil, func() float64 { return float64(s.Dropped.Load()) })
	metrics.CounterFunc(reg, "crowdlog_vectors_refused_requests_total", "Unmasking requests the coordinator refused (check --sign-key against the coordinator's --aggregator-key).", nil, func() float64 { return float64(s.RefusedRequests.Load()) })
	metrics.GaugeFunc(reg, "crowdlog_vectors_open_groups", "Groups not yet final in the partitions this process owns.", nil, func() float64 { return float64(s.OpenGroups()) })
	for _, reason := range vectors.ControlDropReasons {
		metrics.CounterFunc(reg, "crowdlog_vectors_control_refused_total", "PDD control records (rosters, ticks, commitments) refused, not applied: unsigned, not signed by the coordinator's key (--coordinator-pub), replayed or malformed, by reason.",
			prometheus.Labels{"reason": reason}, func() float64 { return float64(s.DroppedByReason()[reason]) })
	}
}

// RegisterPDDRelease exposes PDD days written and skipped (already written),
// outcomes dropped, days refused, and the consumer lag per partition of the
// group-sums topic.
func RegisterPDDRelease(reg prometheus.Registerer, st *pddrelease.Stage) {
	metrics.GaugeMapFunc(reg, "crowdlog_pdd_release_consumer_lag", "Messages of the group-sums topic behind the partition's end (high watermark − next offset) at the last read, per partition.",
		"partition", func() map[string]float64 { return lagMap(st.ConsumerLag()) })
	metrics.CounterFunc(reg, "crowdlog_pdd_release_days_total", "PDD days written to ClickHouse.", nil, func() float64 { return float64(st.Rounds.Load()) })
	metrics.CounterFunc(reg, "crowdlog_pdd_release_skipped_total", "PDD days found already written.", nil, func() float64 { return float64(st.Skipped.Load()) })
	metrics.CounterFunc(reg, "crowdlog_pdd_release_dropped_total", "Group outcomes dropped by the PDD release.", nil, func() float64 { return float64(st.Dropped.Load()) })
	metrics.CounterFunc(reg, "crowdlog_pdd_release_refused_total", "PDD days refused over the privacy budget.", nil, func() float64 { return float64(st.Refused.Load()) })
}

// RegisterCoordinator exposes the PDD coordinator's pings answered and
// requests answered with an error.
func RegisterCoordinator(reg prometheus.Registerer, co *coordinator.Coordinator) {
	metrics.CounterFunc(reg, "crowdlog_coordinator_pings_total", "Client pings answered.", nil, func() float64 { return float64(co.Pings.Load()) })
	metrics.CounterFunc(reg, "crowdlog_coordinator_errors_total", "Requests answered with an error.", nil, func() float64 { return float64(co.Errors.Load()) })
	for _, reason := range []string{coordinator.RefusedMalformed, coordinator.RefusedSignature, coordinator.RefusedReplay, coordinator.RefusedUnknown,
		coordinator.RefusedNotMember, coordinator.RefusedConflict, coordinator.RefusedUnconfigured, coordinator.RefusedReplySubject} {
		metrics.CounterFunc(reg, "crowdlog_coordinator_refused_total", "Requests refused (forged, replayed, malformed), by reason.",
			prometheus.Labels{"reason": reason}, func() float64 { return float64(co.Refused()[reason]) })
	}
}
