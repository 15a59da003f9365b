// Command pdd-groups is a program that embeds crowdlog's PDD groups-mode
// client (ingest/pdd): it counts the monitored keywords in one day's
// searches of a user and takes part in the campaign's blinded groups —
// the aggregator only ever sees a group's sum (Primault et al., WWW 2019;
// docs/pdd.md).
//
//	go run ./examples/pdd-groups --nats nats://127.0.0.1:4222 --keys keys --state device1 \
//	    --campaign flu --keywords keywords.txt --day 2026-11-24 "made up weather" "made up news"
//
// An app runs it once a day (the client's contact of the day, pdd.Ping):
// the first run registers (pdd.Register, which refuses a coordinator that
// runs another campaign or keyword list, naming both values); later runs
// reopen the state file (pdd.Open). Each run submits the rounds the
// coordinator says the client owes and answers its group's unmasking
// request. The coordinator asks on day D+1 (or up to the campaign's delay
// later) for day D's counts, so the positional searches are those of --day:
// an app passes the searches of the oldest day not yet settled, from its
// own history; a round whose day has no searches here is sent as zeros.
//
// --keys holds relay-a.key.pub, relay-b.key.pub, aggregator.key.pub and
// coordinator-sign.key.pub (the client blinds only for rosters the
// coordinator signed with it, and pins it in its state file);
// --state is a directory with the client's state file (pdd-client.json:
// its keys, sequence number, rounds sent and requests answered; losing it
// makes the device a new client, and its pending rounds are dropped).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/pdd"
)

// stateFile is the client's state file in --state.
const stateFile = "pdd-client.json"

func main() {
	natsURL := flag.String("nats", "nats://127.0.0.1:4222", "the deployment's NATS URL")
	nkey := flag.String("nats-nkey", "", "the client's NATS NKey seed file (a deployment with the permission table on)")
	keys := flag.String("keys", "keys", "directory with relay-a.key.pub, relay-b.key.pub, aggregator.key.pub, coordinator-sign.key.pub")
	state := flag.String("state", "crowdlog-pdd-device", "this device's state directory")
	campaign := flag.String("campaign", "pdd", "the campaign's name")
	list := flag.String("keywords", "", "the campaign's keyword list, one per line (default: the embedded list)")
	day := flag.String("day", "", "the day (UTC, YYYY-MM-DD) of the positional searches (default: today)")
	flag.Parse()
	d := time.Now().UTC()
	if *day != "" {
		var err error
		if d, err = time.Parse("2006-01-02", *day); err != nil {
			fmt.Fprintln(os.Stderr, "pdd-groups: --day: want YYYY-MM-DD")
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *natsURL, *nkey, *keys, *state, *campaign, *list, keywords.DayOf(d), flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "pdd-groups:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, natsURL, nkey, keys, state, campaign, listPath string, day keywords.Day, queries []string) error {
	list, err := keywords.Load(listPath)
	if err != nil {
		return err
	}
	// the day's searches as log records: one user, a second apart
	var recs []aol.Record
	for i, q := range queries {
		recs = append(recs, aol.Record{Line: i + 1, AnonID: "1", Query: q, QueryTime: day.Time().Add(12*time.Hour + time.Duration(i)*time.Second)})
	}
	tr, err := pdd.Dial(ctx, pdd.Config{NATS: natsURL, NATSSecurity: ingest.NATSSecurity{NKeyFile: nkey}, KeysDir: keys,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	path := filepath.Join(state, stateFile)
	var c *pdd.Client
	if _, err := os.Stat(path); err == nil {
		if c, err = pdd.Open(path, list); err != nil {
			return errors.Join(err, tr.Close(ctx))
		}
		if c.Campaign != campaign {
			return errors.Join(fmt.Errorf("%s is a client of campaign %q, not --campaign %q: use another --state", path, c.Campaign, campaign), tr.Close(ctx))
		}
	} else {
		if err := os.MkdirAll(state, 0o700); err != nil {
			return errors.Join(err, tr.Close(ctx))
		}
		if c, err = pdd.Register(ctx, tr, campaign, list, path); err != nil {
			return errors.Join(err, tr.Close(ctx))
		}
		fmt.Printf("registered for campaign %s\n", campaign)
	}
	c.Counts = list.Counts(recs, nil)
	st, err := c.Ping(ctx, tr)
	if cerr := tr.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("pinged: %d rounds submitted, %d unmasking requests answered (%d searches of %s)\n", st.Submitted, st.Answered, len(queries), strings.TrimSpace(day.String()))
	return nil
}
