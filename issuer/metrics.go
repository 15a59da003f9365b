package issuer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crowdlog/crowdlog/infra/metrics"
)

// Register registers the issuer's metrics: crowdlog_issuer_issued_total
// (tokens and credentials), crowdlog_issuer_reissued_total (requests
// answered again as retries, not counted again: RetryRecords) and
// crowdlog_issuer_refused_total{reason}.
func (s *Service) Register(reg prometheus.Registerer) {
	metrics.CounterFunc(reg, "crowdlog_issuer_issued_total", "Privacy Pass tokens and ARC credentials issued", nil,
		func() float64 { return float64(s.Issued.Load()) })
	metrics.CounterFunc(reg, "crowdlog_issuer_reissued_total", "issue requests answered again as retries of an issuance (counted once, when first issued)", nil,
		func() float64 { return float64(s.Reissued.Load()) })
	for _, r := range reasons {
		metrics.CounterFunc(reg, "crowdlog_issuer_refused_total", "issue requests refused, by reason", prometheus.Labels{"reason": r},
			func() float64 { return float64(s.RefusedBy(r)) })
	}
}
