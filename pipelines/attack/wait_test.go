package attack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// settle polls count every 20 ms until it reaches want or wait has
// passed; it returns the last count and how long it polled. A control
// run (the attack working) settles with a generous wait and ends as soon
// as the whole effect arrived; the fixed run then waits calibratedWait.
func settle(wait time.Duration, want int, count func() int) (int, time.Duration) {
	start := time.Now()
	for {
		n := count()
		if n >= want || time.Since(start) >= wait {
			return n, time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settleControl bounds how long a control run waits for its whole effect.
const settleControl = 30 * time.Second

// calibratedWait is how long a fixed run waits for an effect that should
// not come: 3 times what the control (the attack working, on the same
// machine just before) took to show its whole effect, at least floor. A
// loaded machine that delivers the control's effect late gives the fixed
// run as much longer a window.
func calibratedWait(control, floor time.Duration) time.Duration {
	return max(floor, 3*control)
}

// refusals has nc's asynchronous errors report the server's publish
// permission errors; the returned function gives a context that ends at
// wait or at the next such error (a refused request gets no answer, only
// the error), so a request the server carries out may take long on a
// loaded machine and a refused one still ends at once. One request at a
// time on nc.
func refusals(nc *nats.Conn) func(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	refused := make(chan struct{}, 1)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if strings.Contains(strings.ToLower(err.Error()), "permissions violation for publish") {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
	})
	return func(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
		select {
		case <-refused: // an earlier request's, late
		default:
		}
		actx, cancel := context.WithTimeout(ctx, wait)
		go func() {
			select {
			case <-refused:
				cancel()
			case <-actx.Done():
			}
		}()
		return actx, cancel
	}
}

// awaitResponders waits until every subject has a responder, 30 s at
// most: an empty request to it gets an answer (a service's refusal
// counts) rather than nats.ErrNoResponders. It replaces a fixed sleep
// after starting a service.
func awaitResponders(t *testing.T, nc *nats.Conn, subjects ...string) {
	t.Helper()
	for _, subj := range subjects {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := nc.Request(subj, nil, 5*time.Second)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("nobody answers %s after 30 s: %v", subj, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
