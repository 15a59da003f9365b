package metrics

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/ready"
)

// ServeRole registers a role's metrics (register; nil: none but the NATS
// responder's) in a new registry and, when addr is set, serves /metrics,
// /healthz and /readyz on it, /readyz answering from checks (none =
// always ready) run every ready.Interval until ctx ends.
func ServeRole(ctx context.Context, addr string, register func(reg prometheus.Registerer), checks ...ready.Check) (*prometheus.Registry, error) {
	reg := NewRegistry()
	// every role: requests a responder refused to answer (reply subject
	// not a requester inbox); 0 in a role that answers none
	if err := natsconn.RegisterMetrics(reg); err != nil {
		return nil, err
	}
	if register != nil {
		register(reg)
	}
	if addr == "" {
		return reg, nil
	}
	rc := ready.New(slog.Default(), checks...)
	rc.Register(reg)
	rc.Start(ctx, 0)
	a, err := Serve(ctx, addr, reg, rc.Ready)
	if err != nil {
		return nil, err
	}
	slog.Info("metrics", "url", "http://"+a.String()+"/metrics")
	return reg, nil
}

// RunRole serves a role's metrics and readiness checks (ServeRole) and
// runs it until ctx ends.
func RunRole(ctx context.Context, addr string, register func(reg prometheus.Registerer), run func(context.Context) error, checks ...ready.Check) error {
	if _, err := ServeRole(ctx, addr, register, checks...); err != nil {
		return err
	}
	return run(ctx)
}
