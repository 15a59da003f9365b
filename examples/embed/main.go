// Command embed is a program that embeds crowdlog's client library
// (ingest.Device): it submits a few made-up search queries as artifacts of
// the "query" application to a running crowdlog deployment, keeping its
// device state (user secret of the epoch, pinned keys, what it sent) in
// --state, so running it again with the same arguments sends nothing twice.
//
//	go run ./examples/embed --nats nats://127.0.0.1:4222 --keys keys --state device1 \
//	    --epoch 2026-11-24 --k 5 "made up weather" "made up news"
//
// Before it sends, the device asks the aggregators (`crowdlog aggregate
// --nats … --pipeline …`) which pipelines they serve and refuses to start,
// naming the value and the ingest.Config field, when --k, the policy or
// --digest disagree with theirs; it seals for the pipeline's digest. After
// it sends, it waits up to --wait for the aggregators' counts of its
// pipeline and epoch (all devices together) and prints them: "submitted N
// reports …; downstream: admitted A, refused R …".
//
// Each argument is one artifact instance at --at plus its position in
// seconds: an instance is identified by its query and time, so a real
// program passes the time the user searched. The epoch must be open at the
// randomness service and the aggregator (`crowdlog randomness open-epoch`,
// `crowdlog aggregate open-epoch`).
package main

import (
	"context"
	"encoding/hex"
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
	k := flag.Int("k", 5, "threshold k of the FT_u release (the pipeline's policy.k)")
	digest := flag.String("digest", "", "the pipeline digest to send for (64 hex digits, `crowdlog pipeline show`); empty: the one the aggregators announce, after checking its k and policy")
	wait := flag.Duration("wait", 10*time.Second, "how long to wait for the aggregators to count the reports after sending (0: do not ask)")
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
	pipes := map[string][32]byte{}
	if *digest != "" {
		b, err := hex.DecodeString(*digest)
		if err != nil || len(b) != 32 {
			fmt.Fprintln(os.Stderr, "embed: --digest: want 64 hex digits (crowdlog pipeline show FILE)")
			os.Exit(2)
		}
		pipes[apps.QueryAppName] = [32]byte(b)
	}
	if err := run(ctx, *natsURL, *keys, *state, *epoch, *k, pipes, *wait, t0, queries); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, natsURL, keys, state, epoch string, k int, pipes map[string][32]byte, wait time.Duration, t0 time.Time, queries []string) error {
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
		// the application sent: New checks K, Policy and Pipelines
		// against the pipelines the aggregators announce and adopts the
		// digest of the one that agrees
		App:       apps.QueryAppName,
		Pipelines: pipes,
		Logger:    slog.Default(),
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
	var before ingest.Downstream
	if wait > 0 {
		if before, err = dev.Downstream(ctx, apps.QueryAppName); err != nil {
			dev.Close(ctx)
			return err
		}
	}
	n, err := dev.Submit(ctx, apps.QueryAppName, arts...)
	if err != nil {
		dev.Close(ctx)
		return err
	}
	fmt.Printf("submitted %d reports (%d artifacts; the others were sent before)\n", n, len(arts))
	if wait > 0 && n > 0 {
		// the relays hold reports in their pools for a while: poll until
		// the aggregators have counted at least n more reports of this
		// pipeline and epoch (other devices' included) or wait ends
		after := before
		for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if after, err = dev.Downstream(ctx, apps.QueryAppName); err != nil {
				break
			}
			if after.Withheld || after.Admitted+after.RefusedTotal()-before.Admitted-before.RefusedTotal() >= int64(n) {
				break
			}
		}
		if err == nil && after.Withheld {
			fmt.Printf("downstream: %s\n", after)
		} else if err == nil {
			fmt.Printf("downstream: %d of %d reports admitted, %d refused since this run started (pipeline %x…, epoch %s; counts of all devices; aggregators now: %s)\n",
				after.Admitted-before.Admitted, n, after.RefusedTotal()-before.RefusedTotal(), after.Pipeline[:6], epoch, after)
		}
	}
	if cerr := dev.Close(ctx); err == nil {
		err = cerr
	}
	return err
}
