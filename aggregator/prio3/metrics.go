package prio3

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crowdlog/crowdlog/infra/metrics"
)

// Known reasons (their series exist at 0 from the start), the token
// refusals included: the leader's own and, as helper_REASON, the helper's.
var (
	rejectReasons  = []string{"malformed", "unknown_key", "campaign", "late", "future", "replay", "decrypt", "key_epoch", "input_share", "joint_rand", "proof", "prep_share"}
	refuseReasons  = []string{"small_batch", "batch_open", "mismatch", "unknown_batch"}
	leaderRejected = append(append([]string{}, rejectReasons...), ReasonMalformedResponse,
		ReasonTokenMissing, ReasonTokenInvalid, ReasonTokenBinding, ReasonTokenSpent,
		"helper_"+ReasonTokenMissing, "helper_"+ReasonTokenInvalid, "helper_"+ReasonTokenBinding)
	helperRejected = append(append([]string{}, rejectReasons...), ReasonMalformedRequest,
		ReasonTokenMissing, ReasonTokenInvalid, ReasonTokenBinding)
)

// reasonCollector exposes name{role, reason} from a role's counters.
type reasonCollector struct {
	desc  *prometheus.Desc
	known []string
	fn    func() map[string]uint64
}

func (c *reasonCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *reasonCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.fn()
	for _, k := range c.known {
		if _, ok := m[k]; !ok {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, 0, k)
		}
	}
	for k, v := range m {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v), k)
	}
}

func register(reg prometheus.Registerer, role string, c *counters, rejected []string) {
	labels := prometheus.Labels{"role": role}
	metrics.CounterFunc(reg, "crowdlog_prio3_prepared_total", "Reports committed to a batch (both aggregators' proof check passed).", labels,
		func() float64 { return float64(c.Stats().Prepared) })
	metrics.CounterFunc(reg, "crowdlog_prio3_collected_total", "Batches whose aggregate share this aggregator handed to the collector.", labels,
		func() float64 { return float64(c.Stats().Collected) })
	reg.MustRegister(&reasonCollector{
		desc: prometheus.NewDesc("crowdlog_prio3_rejected_total",
			"Reports (and, as malformed_request/malformed_response, leader-helper messages) dropped, by reason; at the leader helper_REASON is the helper's reason for a report.",
			[]string{"reason"}, labels),
		known: rejected, fn: func() map[string]uint64 { return c.Stats().Rejected }})
	reg.MustRegister(&reasonCollector{
		desc: prometheus.NewDesc("crowdlog_prio3_collect_refused_total",
			"Batch collections refused, by reason (at the leader helper_REASON is the helper's refusal).", []string{"reason"}, labels),
		known: refuseReasons, fn: func() map[string]uint64 { return c.Stats().CollectRefused }})
}

// Register exposes the leader's counters on reg:
// crowdlog_prio3_uploads_total, crowdlog_prio3_uploads_skipped_total,
// crowdlog_prio3_uploads_deleted_total,
// crowdlog_prio3_uploads_delete_failures_total (not kept across restarts),
// and crowdlog_prio3_prepared_total,
// crowdlog_prio3_rejected_total{reason}, crowdlog_prio3_collect_refused_total{reason}
// and crowdlog_prio3_collected_total with role="leader". The counters are
// kept in the snapshot: they continue across restarts.
func (s *LeaderService) Register(reg prometheus.Registerer) {
	metrics.CounterFunc(reg, "crowdlog_prio3_uploads_total", "Client uploads read by the leader (accepted or not).", nil,
		func() float64 { return float64(s.Stats().Uploads) })
	metrics.CounterFunc(reg, "crowdlog_prio3_uploads_skipped_total", "Records of the uploads topic keyed for another campaign (or not keyed), skipped without being opened.", nil,
		func() float64 { return float64(s.OtherCampaign.Load()) })
	metrics.CounterFunc(reg, "crowdlog_prio3_uploads_deleted_total", "Records of the uploads topic the leader deleted (--delete-applied-uploads: Kafka DeleteRecords below the offsets its snapshots passed), since the process started.", nil,
		func() float64 { return float64(s.UploadsDeleted.Load()) })
	metrics.CounterFunc(reg, "crowdlog_prio3_uploads_delete_failures_total", "Requests of --delete-applied-uploads that failed (listing log start offsets, scanning for other campaigns' records, DeleteRecords), since the process started; each is logged at WARN and retried in the next round.", nil,
		func() float64 { return float64(s.DeleteFailures.Load()) })
	register(reg, "leader", &s.counters, leaderRejected)
}

// Register exposes the helper's counters on reg (as the leader's, with
// role="helper"; no uploads counter: the helper never sees an upload).
//
// It also exposes crowdlog_prio3_requests_refused_total{reason}: requests
// refused before any state change (RefusedReplySubject, RefusedUnsigned,
// RefusedSignature, RefusedStale, RefusedReplay).
func (s *HelperService) Register(reg prometheus.Registerer) {
	register(reg, "helper", &s.counters, helperRejected)
	reg.MustRegister(&reasonCollector{
		desc: prometheus.NewDesc("crowdlog_prio3_requests_refused_total",
			"Requests the helper refused before changing any state, by reason: reply_subject (not a requester inbox), unsigned, bad_signature (not the leader's key), stale (issue time outside the helper's clock window), request_replay.",
			[]string{"reason"}, prometheus.Labels{"role": "helper"}),
		known: refusedReasons, fn: s.Refused})
}
