package randomness

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/infra/spent"
	"github.com/crowdlog/crowdlog/protocol/oprf"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// BenchmarkHandleTokens is the service's work per request of 100
// elements (parse, [token checks and spends,] evaluate and prove), without
// the NATS hop of the request itself: tokens=off as before tokens,
// tokens=on with one randomness token per element verified and spent in
// JetStream KV on an embedded single NATS server (one async batch of 100
// spends). Fresh tokens are minted outside the timer.
func BenchmarkHandleTokens(b *testing.B) {
	const elements = 100
	ctx := context.Background()
	dir := b.TempDir()
	srv, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	keys, err := Open(filepath.Join(dir, "keys"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := keys.OpenEpoch("e1"); err != nil {
		b.Fatal(err)
	}
	sk, _ := keys.Lookup("e1")
	tokKey, _ := token.GenerateKey(token.KindRandomness, "e1")
	store, err := spent.Open(ctx, nc, spent.Options{})
	if err != nil {
		b.Fatal(err)
	}
	inputs := make([][]byte, elements)
	for i := range inputs {
		inputs[i] = oprf.OPRFInput("query", "e1", fmt.Sprint("artifact ", i))
	}
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("tokens=%v", on), func(b *testing.B) {
			s := &Service{NC: nc, Keys: keys, RequireTokens: on, Spent: store,
				TokenKeys: func(string) (*token.PrivateKey, error) { return tokKey, nil }}
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				_, q, err := oprf.Blind(sk.Public(), "e1", inputs)
				if err != nil {
					b.Fatal(err)
				}
				if on {
					for _, t := range issue(b, tokKey, elements) {
						tb, _ := t.MarshalBinary()
						q.Tokens = append(q.Tokens, tb)
					}
				}
				data, _ := q.MarshalBinary()
				b.StartTimer()
				if resp := s.handle(ctx, data); resp.Refused() {
					b.Fatal(resp.Error)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*elements), "ns/element")
		})
	}
}
