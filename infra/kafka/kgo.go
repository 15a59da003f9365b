package kafka

import (
	"context"
	"net"
	"strconv"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/kgo"
	kgosasl "github.com/twmb/franz-go/pkg/sasl"
)

// KgoOpts returns the franz-go client options (github.com/twmb/franz-go
// kgo) that authenticate as a does: its TLS configuration (kgo.DialTLSConfig,
// the server name defaulting to the dialled host) and its SASL mechanism,
// the same kafka-go mechanism and credential bridged to franz-go's
// interface. A nil a gives none (plaintext, no SASL). For the requests
// kafka-go has no client for (DeleteRecords, KIP-107).
func (a *Auth) KgoOpts() []kgo.Opt {
	var opts []kgo.Opt
	if a == nil {
		return opts
	}
	if a.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(a.TLS.Clone()))
	}
	if a.SASL != nil {
		opts = append(opts, kgo.SASL(kgoMechanism{a.SASL}))
	}
	return opts
}

// KgoOpts is AuthFrom(ctx).KgoOpts().
func KgoOpts(ctx context.Context) []kgo.Opt { return AuthFrom(ctx).KgoOpts() }

// kgoMechanism runs a kafka-go SASL mechanism (RFC 4616 PLAIN, RFC 5802
// SCRAM) under franz-go: Start gives the first message, each server
// message goes to the state machine's Next.
type kgoMechanism struct{ m sasl.Mechanism }

func (k kgoMechanism) Name() string { return k.m.Name() }

func (k kgoMechanism) Authenticate(ctx context.Context, host string) (kgosasl.Session, []byte, error) {
	h, p, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	port, _ := strconv.Atoi(p)
	ctx = sasl.WithMetadata(ctx, &sasl.Metadata{Host: h, Port: port})
	sm, first, err := k.m.Start(ctx)
	if err != nil {
		return nil, nil, err
	}
	return kgoSession{ctx: ctx, sm: sm}, first, nil
}

type kgoSession struct {
	ctx context.Context
	sm  sasl.StateMachine
}

func (s kgoSession) Challenge(b []byte) (bool, []byte, error) { return s.sm.Next(s.ctx, b) }
