package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	aggprio3 "github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/prio3"
	"github.com/crowdlog/crowdlog/protocol"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
	"github.com/crowdlog/crowdlog/relays"
)

// TestAttackPrio3SettingsDowngrade: the leader's operator alone — its
// own signing key, its own NATS credential — announces weaker privacy
// settings than the campaign's: ε = 50 per person-day with a minimum
// batch of 1, and in a second arm exact shares (no noise). The
// announcement is the real leader's (aggregator/prio3
// LeaderService.ServeSettings, signed with the leader operator's real
// key on an embedded nats-server); the devices are the real
// ingest/prio3 Device with the default floor, sealing to relay a's
// JetStream inbox (the real relay stream). Counted: reports stored in
// relay a's inbox (the stream's own message count), for devices that
// start under the weakened announcement and for devices opened under the
// shipped defaults (ε = 1, minimum 100) that upload after the leader
// re-announces. The control re-announces the shipped defaults: the same
// devices then seal every report.
func TestAttackPrio3SettingsDowngrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newDowngradeWorld(t, ctx)
	inbox, announce, config, searchesOf, day := w.inbox, w.announce, w.config, w.searchesOf, w.day
	searches := searchesOf(day)
	var err error
	const n = 4
	// arm 1: devices that start under the weakened announcement
	fresh := func(arm string) (sealed int, refusal string) {
		before := inbox()
		for i := range n {
			d, err := prio3.New(ctx, config(fmt.Sprintf("%s-%d", arm, i)))
			if err != nil {
				if !errors.Is(err, prio3.ErrSettingsWeaker) {
					t.Fatalf("%s: device %d: %v, want a refusal for weaker settings", arm, i, err)
				}
				refusal = err.Error()
				continue
			}
			if _, err := d.UploadSearches(ctx, day, searches); err != nil {
				t.Fatalf("%s: device %d: upload: %v", arm, i, err)
			}
			must(t, d.Close(ctx))
		}
		return inbox() - before, refusal
	}
	announce(50, 1)
	sealed50, ref50 := fresh("eps50-min1")
	announce(0, 1)
	sealed0, ref0 := fresh("exact-min1")

	// arm 2: devices opened under the shipped defaults; the leader then
	// re-announces ε = 50, minimum 1, and the devices upload
	announce(aggprio3.DefaultEpsilon, 100)
	devs := make([]*prio3.Device, n)
	for i := range devs {
		devs[i], err = prio3.New(ctx, config(fmt.Sprintf("running-%d", i)))
		must(t, err)
		defer devs[i].Close(ctx)
	}
	announce(50, 1)
	before := inbox()
	var runRefusal string
	for i, d := range devs {
		if _, err := d.UploadSearches(ctx, day, searches); err != nil {
			if !errors.Is(err, prio3.ErrSettingsWeaker) {
				t.Fatalf("running device %d: %v, want a refusal for weaker settings", i, err)
			}
			runRefusal = err.Error()
		}
	}
	sealedRunning := inbox() - before
	var counted uint64
	for _, d := range devs {
		counted += d.Stats().SettingsWeaker
	}
	// control: the shipped defaults again; the same devices seal (the
	// next day's report: the day above is sent where the check is off)
	announce(aggprio3.DefaultEpsilon, 100)
	before = inbox()
	for i, d := range devs {
		if _, err := d.UploadSearches(ctx, day+1, searchesOf(day+1)); err != nil {
			t.Errorf("control: running device %d: %v", i, err)
		}
	}
	sealedControl := inbox() - before

	fmt.Printf("ATTACK prio3-settings-downgrade: the leader operator's key announces ε = 50, min batch 1: %d of %d new devices sealed a report; exact shares (no noise), min batch 1: %d of %d; devices opened under ε = 1, min 100, then re-announced ε = 50, min 1: %d of %d sealed (%d refusals counted in Device.Stats); control, ε = 1, min 100 again: %d of %d sealed\n",
		sealed50, n, sealed0, n, sealedRunning, n, counted, sealedControl, n)
	if sealed50+sealed0+sealedRunning != 0 {
		t.Fatalf("devices sealed %d + %d + %d reports under a weakened announcement", sealed50, sealed0, sealedRunning)
	}
	if sealedControl != n || counted != n {
		t.Fatalf("control: %d of %d sealed, %d refusals counted", sealedControl, n, counted)
	}
	for _, c := range []struct{ ref, param, field string }{
		{ref50, "epsilon", "Config.MaxEpsilon"}, {ref0, "noise", "Config.AllowExactShares"}, {runRefusal, "epsilon", "Config.MaxEpsilon"},
	} {
		if !strings.Contains(c.ref, c.param) || !strings.Contains(c.ref, c.field) {
			t.Fatalf("refusal %q does not name %s and %s", c.ref, c.param, c.field)
		}
	}
	t.Logf("refusal: %s", ref50)
}

// downgradeWorld is the harness of the settings downgrade attacks: an
// embedded nats-server with the relay JetStream stream, each operator's
// real keys, the real leader announcement (announce re-makes it with
// other settings, as a restart of `crowdlog aggregate-prio3 --role
// leader` with other flags would), device configurations with the
// default floor, and inbox, the count of reports stored in relay a's
// inbox (the stream's own count).
type downgradeWorld struct {
	inbox          func() int
	announce       func(eps float64, minBatch uint64)
	announceStatus func(eps float64, minBatch uint64, statusEps, statusDelta float64)
	config         func(name string) prio3.Config
	searchesOf     func(d keywords.Day) []prio3.Search
	day            keywords.Day
}

func newDowngradeWorld(t *testing.T, ctx context.Context) *downgradeWorld {
	t.Helper()
	dir := t.TempDir()
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	must(t, err)
	t.Cleanup(ns.Shutdown)
	admin, err := natsconn.Connect(ns.URL, "admin")
	must(t, err)
	t.Cleanup(admin.Close)
	js, err := jetstream.New(admin)
	must(t, err)
	must(t, relays.EnsureStream(ctx, js, 0))
	inbox := func() int {
		s, err := js.Stream(ctx, relays.Stream)
		must(t, err)
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(protocol.RelaySubject("a")))
		must(t, err)
		return int(info.State.Msgs)
	}

	// each operator's keys; the public files the app ships
	relayDir, leaderDir, helperDir, public := filepath.Join(dir, "relays"), filepath.Join(dir, "leader"), filepath.Join(dir, "helper"), filepath.Join(dir, "public")
	must(t, keydir.EnsureKeys(relayDir))
	must(t, keydir.GenerateRole(leaderDir, keydir.RolePrio3Leader))
	must(t, keydir.GenerateRole(helperDir, keydir.RolePrio3Helper))
	must(t, os.MkdirAll(public, 0o755))
	for name, src := range map[string]string{keydir.RelayAKey: relayDir, keydir.RelayBKey: relayDir, keydir.Prio3LeaderKey: leaderDir,
		keydir.Prio3HelperKey: helperDir, keydir.Prio3LeaderSignKey: leaderDir} {
		copyFile(t, filepath.Join(src, name+".pub"), filepath.Join(public, name+".pub"))
	}
	list, err := keywords.Parse(strings.NewReader("weather\nnews\nrecipe\nfootball\n"))
	must(t, err)
	leaderKeys, err := keydir.LoadKeyPairs([]string{filepath.Join(leaderDir, keydir.Prio3LeaderKey)})
	must(t, err)
	sign, err := keydir.LoadSigningKey(filepath.Join(leaderDir, keydir.Prio3LeaderSignKey))
	must(t, err)
	const campaign = "downgrade"
	m := p3.Config{Kind: p3.KindSumVec, Length: list.Len(), Bits: 4, L1: 20}

	// the leader operator's announcement, re-made with other settings
	// (a restart of `crowdlog aggregate-prio3 --role leader` with other
	// --epsilon and --min-batch-size)
	var stop func()
	announceStatus := func(eps float64, minBatch uint64, statusEps, statusDelta float64) {
		if stop != nil {
			stop()
		}
		nc, err := natsconn.Connect(ns.URL, "prio3-leader")
		must(t, err)
		ls := &aggprio3.LeaderService{Config: aggprio3.Config{Campaign: campaign, Measurement: m, MinBatchSize: minBatch, Epsilon: eps, Keys: leaderKeys,
			StatusEpsilon: statusEps, StatusDelta: statusDelta},
			NATS: nc, SignKey: sign, ListHash: list.Hash()}
		sub, err := ls.ServeSettings(nil)
		must(t, err)
		// a round trip: the server holds the subscription before a device asks
		must(t, nc.Flush())
		stop = func() {
			// the server drops the old answerer before the next one starts
			must(t, sub.Unsubscribe())
			must(t, nc.Flush())
			nc.Close()
		}
	}
	t.Cleanup(func() { stop() })
	// the leader's default day status: ε_c = 0.1 × ε, δ = 10⁻⁶
	// (--status-epsilon, --status-delta left alone)
	announce := func(eps float64, minBatch uint64) {
		announceStatus(eps, minBatch, p3.StatusEpsilonOf(p3.AutoStatusEpsilon, eps), p3.DefaultStatusDelta)
	}

	day := keywords.DayOf(time.Now().UTC())
	searchesOf := func(d keywords.Day) []prio3.Search {
		return []prio3.Search{{Query: "weather today", Time: d.Time().Add(time.Hour)}, {Query: "football news", Time: d.Time().Add(2 * time.Hour)}}
	}
	config := func(name string) prio3.Config {
		return prio3.Config{StateDir: filepath.Join(dir, "devices", name), NATS: ns.URL, KeysDir: public, SkipRouteCheck: true,
			Campaign: campaign, Keywords: list, Measurement: p3.Config{Kind: p3.KindSumVec, Bits: 4, L1: 20}, Retry: prio3.Retry{MaxTries: 1}}
	}
	return &downgradeWorld{inbox: inbox, announce: announce, announceStatus: announceStatus, config: config, searchesOf: searchesOf, day: day}
}
