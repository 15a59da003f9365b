// Command embed is a program that embeds crowdlog's client library
// (ingest.Device): it submits a few made-up search queries as artifacts of
// the "query" application to a running crowdlog deployment, keeping its
// device state (user secret of the epoch, pinned keys, what it sent) in
// --state, so running it again with the same arguments sends nothing twice.
//
//	go run ./examples/embed --nats nats://127.0.0.1:4222 --keys keys --state device1 \
//	    --epoch 2026-11-24 --k 2 "made up weather" "made up news"
//
// Each argument is one artifact instance at --at plus its position in
// seconds: an instance is identified by its query and time, so a real
// program passes the time the user searched. The epoch must be open at the
// randomness service and the aggregator (`crowdlog randomness open-epoch`,
// `crowdlog aggregate open-epoch`).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/ingest/normalize"
	"github.com/crowdlog/crowdlog/protocol/star"
)

func main() {
	natsURL := flag.String("nats", "nats://127.0.0.1:4222", "the deployment's NATS URL (comma-separated for a cluster)")
	keys := flag.String("keys", "keys", "directory with relay-a.key.pub, relay-b.key.pub, aggregator.key.pub")
	state := flag.String("state", "crowdlog-device", "this device's state directory")
	epoch := flag.String("epoch", "all", "epoch to send in (opened by the operator)")
	k := flag.Int("k", 5, "threshold k of the FT_u release")
	at := flag.String("at", "", "RFC 3339 time of the first artifact (default: now)")
	flag.Parse()
	queries := flag.Args()
	if len(queries) == 0 {
		queries = []string{"made up weather", "made up news", "made up weather"}
	}
	t0 := time.Now().UTC().Truncate(time.Second)
	if *at != "" {
		var err error
		if t0, err = time.Parse(time.RFC3339, *at); err != nil {
			fmt.Fprintln(os.Stderr, "embed: --at:", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *natsURL, *keys, *state, *epoch, *k, t0, queries); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, natsURL, keys, state, epoch string, k int, t0 time.Time, queries []string) error {
	dev, err := ingest.New(ctx, ingest.Config{
		StateDir: state,
		NATS:     natsURL,
		KeysDir:  keys,
		// ω comes from the randomness service over the same NATS; every
		// answer is verified against the epoch's public key, which the
		// device pins in its state
		Epoch:  epoch,
		Policy: star.FTu,
		K:      k,
		Logger: slog.Default(),
	})
	if err != nil {
		return err
	}
	var arts []apps.Artifact
	for i, q := range queries {
		// the query application's artifact: the normalized query N(q),
		// with the query as typed as its variant (what apps.QueryApp mines)
		nq, ok := normalize.Query(q)
		if !ok {
			continue // empty: not an artifact
		}
		arts = append(arts, apps.Artifact{Primary: nq, Secondary: q, Time: t0.Add(time.Duration(i) * time.Second)})
	}
	n, err := dev.Submit(ctx, apps.QueryAppName, arts...)
	if cerr := dev.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("submitted %d reports (%d artifacts; the others were sent before)\n", n, len(arts))
	return nil
}
