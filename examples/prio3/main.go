// Command prio3 is a program that embeds crowdlog's Prio3-mode client
// (ingest/prio3 Device): it uploads one day's report of a user's searches
// to a running Prio3 campaign — per monitored keyword, how many of the
// day's searches contain it, clipped and split between the leader and the
// helper aggregator, who only ever see the sum over all devices.
//
//	go run ./examples/prio3 --state device1 --identity     # once: the key the helper's operator enrolls
//	go run ./examples/prio3 --nats nats://127.0.0.1:4222 --keys keys --state device1 \
//	    --campaign c1 --keywords keywords.txt --bits 4 --l1 20 --day 2026-11-24 "made up weather" "made up news"
//
// --keys holds the operators' public key files (relay-a.key.pub,
// relay-b.key.pub, prio3-leader.key.pub, prio3-helper.key.pub,
// prio3-leader-sign.key.pub); --fingerprint NAME=SHA256 pins one to the
// fingerprint its operator published. The measurement flags must equal the
// campaign's: the device asks the leader for its signed settings and
// refuses to upload, naming the value, when they differ. It also refuses
// when the leader announces privacy settings weaker than the app's floor
// (--max-epsilon, --min-batch-floor, --allow-exact-shares,
// --max-status-epsilon, --max-status-delta, --allow-exact-status; the
// defaults accept the aggregators' defaults ε = 1, a minimum batch of 100
// and a noisy day status of ε_c = 0.1, δ = 10⁻⁶).
// Running it again for the same day sends nothing (the state directory
// records the day).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/prio3"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

type fingerprints map[string]string

func (f fingerprints) String() string { return fmt.Sprint(map[string]string(f)) }
func (f fingerprints) Set(s string) error {
	name, fp, ok := strings.Cut(s, "=")
	if !ok {
		return errors.New("want NAME=SHA256")
	}
	f[name] = fp
	return nil
}

func main() {
	natsURL := flag.String("nats", "nats://127.0.0.1:4222", "the deployment's NATS URL")
	nkey := flag.String("nats-nkey", "", "the client's NATS NKey seed file (a deployment with the permission table on)")
	keys := flag.String("keys", "", "directory with the operators' public key files (needed on the first run)")
	state := flag.String("state", "crowdlog-prio3-device", "this device's state directory")
	identity := flag.Bool("identity", false, "create the device's identity key and print the file to enroll, then exit")
	campaign := flag.String("campaign", "", "the campaign's name")
	list := flag.String("keywords", "", "the campaign's keyword list, one per line (default: the embedded list)")
	kind := flag.String("kind", "sumvec", "sumvec (counts clipped to 2^bits − 1) or presence")
	bits := flag.Int("bits", 4, "sumvec: bits per count")
	maxWeight := flag.Int("max-weight", 0, "presence: most keywords per report")
	chunk := flag.Int("chunk", 0, "the proof's chunk length (0 = default)")
	l1 := flag.Uint64("l1", p3.DefaultL1, "sumvec: the campaign's bound S on a day's sum of counts")
	digest := flag.String("digest", "", "the campaign digest the operators publish (optional)")
	tokens := flag.Bool("helper-tokens", true, "fetch a helper token per upload (the helper's default)")
	ltokens := flag.Bool("leader-tokens", true, "fetch a leader token per upload (the leader's default)")
	day := flag.String("day", "", "the day (YYYY-MM-DD, UTC) the searches are of (default: today)")
	maxEps := flag.Float64("max-epsilon", prio3.DefaultMaxEpsilon, "the largest ε per person-day the leader may announce")
	minBatch := flag.Uint64("min-batch-floor", prio3.DefaultMinBatchFloor, "the smallest minimum batch size the leader may announce")
	exact := flag.Bool("allow-exact-shares", false, "accept a leader that announces exact shares (ε = 0, no noise)")
	maxStatus := flag.Float64("max-status-epsilon", prio3.DefaultMaxStatusEpsilon, "the largest ε_c of each day's released/withheld status the leader may announce")
	maxDelta := flag.Float64("max-status-delta", prio3.DefaultMaxStatusDelta, "the largest δ of each day's status the leader may announce")
	exactStatus := flag.Bool("allow-exact-status", false, "accept a leader that announces the exact minimum batch rule for each day's status (ε_c = 0: the status tells whether one person took part on a day of min − 1 reports)")
	fps := fingerprints{}
	flag.Var(fps, "fingerprint", "NAME=SHA256 of a key file, as its operator published it (repeatable)")
	flag.Parse()
	if *identity {
		pub, err := prio3.EnsureIdentity(*state)
		if err != nil {
			fmt.Fprintln(os.Stderr, "prio3-example:", err)
			os.Exit(1)
		}
		fmt.Println(pub)
		return
	}
	d := time.Now().UTC()
	if *day != "" {
		var err error
		if d, err = time.Parse(time.DateOnly, *day); err != nil {
			fmt.Fprintln(os.Stderr, "prio3-example: --day:", err)
			os.Exit(2)
		}
	}
	m := p3.Config{Kind: p3.KindSumVec, Bits: *bits, Chunk: *chunk, L1: *l1}
	if *kind == "presence" {
		m = p3.Config{Kind: p3.KindPresence, MaxWeight: *maxWeight, Chunk: *chunk}
	}
	kw, err := keywords.Load(*list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prio3-example:", err)
		os.Exit(2)
	}
	cfg := prio3.Config{StateDir: *state, NATS: *natsURL, KeysDir: *keys, Fingerprints: fps,
		Campaign: *campaign, Keywords: kw, Measurement: m, Digest: *digest, HelperTokens: *tokens, LeaderTokens: *ltokens,
		MaxEpsilon: *maxEps, MinBatchFloor: *minBatch, AllowExactShares: *exact,
		MaxStatusEpsilon: *maxStatus, MaxStatusDelta: *maxDelta, AllowExactStatus: *exactStatus,
		Retry: prio3.Retry{MaxElapsed: time.Minute}, Logger: slog.Default()}
	cfg.NATSSecurity.NKeyFile = *nkey
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, d, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "prio3-example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg prio3.Config, day time.Time, queries []string) error {
	dev, err := prio3.New(ctx, cfg)
	if err != nil {
		return err
	}
	searches := make([]prio3.Search, len(queries))
	for i, q := range queries {
		// a real program passes the time the user searched
		searches[i] = prio3.Search{Query: q, Time: day.Add(time.Duration(i) * time.Second)}
	}
	s, err := dev.UploadSearches(ctx, keywords.DayOf(day), searches)
	if cerr := dev.Close(ctx); err == nil {
		err = cerr
	}
	if errors.Is(err, prio3.ErrAlreadySent) {
		fmt.Printf("already uploaded for %s\n", day.Format(time.DateOnly))
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf("uploaded the report of %s (%d searches, %d counts clipped, %d bytes); campaign digest %s\n",
		day.Format(time.DateOnly), len(queries), s.Clipped, s.Bytes, dev.Digest())
	return nil
}
