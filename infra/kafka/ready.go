package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/infra/ready"
)

// ReadyCheck checks that at least one of brokers (host:port) answers a
// metadata request listing at least one broker. Each try uses its own
// connection, closed afterwards, so no cached metadata hides a broker that
// went away. Name "kafka". a authenticates (TLS and SASL; nil: plaintext),
// so a secured cluster answers as it answers the role. It lives here, not
// in infra/ready, so that what links infra/ready (every role and the
// client, through infra/metrics) links no Kafka client.
func ReadyCheck(brokers []string, a *Auth) ready.Check {
	return ready.Check{Name: "kafka", Fn: func(ctx context.Context) error {
		if len(brokers) == 0 {
			return errors.New("no brokers configured")
		}
		var errs []string
		for _, b := range brokers {
			if err := readyMetadata(ctx, b, a); err != nil {
				errs = append(errs, err.Error())
				if ctx.Err() != nil {
					break
				}
				continue
			}
			return nil
		}
		return fmt.Errorf("no broker answers metadata: %s", strings.Join(errs, "; "))
	}}
}

func readyMetadata(ctx context.Context, broker string, a *Auth) error {
	tr := a.Transport()
	defer tr.CloseIdleConnections()
	cl := &kafkago.Client{Addr: kafkago.TCP(broker), Transport: tr}
	resp, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{}})
	if err != nil {
		return fmt.Errorf("%s: %w", broker, err)
	}
	if len(resp.Brokers) == 0 {
		return fmt.Errorf("%s: metadata lists no brokers", broker)
	}
	return nil
}
