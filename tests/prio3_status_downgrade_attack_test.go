package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	aggprio3 "github.com/crowdlog/crowdlog/aggregator/prio3"
	"github.com/crowdlog/crowdlog/ingest/prio3"
	p3 "github.com/crowdlog/crowdlog/protocol/prio3"
)

// TestAttackPrio3StatusDowngrade: the leader's operator alone — its own
// signing key, its own NATS credential — keeps the campaign's ε = 1 and
// minimum batch 100 but weakens the rule that decides each day's
// released/withheld status: the exact minimum batch rule
// (--status-epsilon 0: a day of min − 1 reports is withheld and one of
// min released, so the status tells whether one person took part), and in
// a second arm ε_c = 50 (the noisy count must pass the minimum by
// ⌈ln(1/(2δ))/50⌉ = 1 at δ = 10⁻⁶: about the exact rule). The
// announcement is the real leader's (aggregator/prio3
// LeaderService.ServeSettings, signed with the leader operator's real key
// on an embedded nats-server, harness newDowngradeWorld); the devices are
// the real ingest/prio3 Device with the default floor, sealing to relay
// a's JetStream inbox. Counted: reports stored in relay a's inbox (the
// stream's own count) from devices that start under the weakened
// announcement and from devices opened under the shipped defaults (ε_c =
// 0.1, δ = 10⁻⁶) that upload after the leader re-announces the exact
// rule. The control re-announces the defaults: the same devices seal.
func TestAttackPrio3StatusDowngrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newDowngradeWorld(t, ctx)
	const n = 4
	eps, minBatch := aggprio3.DefaultEpsilon, uint64(100)
	fresh := func(arm string) (sealed int, refusal string) {
		before := w.inbox()
		for i := range n {
			d, err := prio3.New(ctx, w.config(fmt.Sprintf("%s-%d", arm, i)))
			if err != nil {
				if !errors.Is(err, prio3.ErrSettingsWeaker) {
					t.Fatalf("%s: device %d: %v, want a refusal for weaker settings", arm, i, err)
				}
				refusal = err.Error()
				continue
			}
			if _, err := d.UploadSearches(ctx, w.day, w.searchesOf(w.day)); err != nil {
				t.Fatalf("%s: device %d: upload: %v", arm, i, err)
			}
			must(t, d.Close(ctx))
		}
		return w.inbox() - before, refusal
	}
	w.announceStatus(eps, minBatch, 0, 0)
	sealedExact, refExact := fresh("exact-status")
	w.announceStatus(eps, minBatch, 50, p3.DefaultStatusDelta)
	sealed50, ref50 := fresh("status-eps50")

	// devices opened under the defaults; the leader then re-announces the
	// exact status rule, and the devices upload
	w.announce(eps, minBatch)
	devs := make([]*prio3.Device, n)
	for i := range devs {
		d, err := prio3.New(ctx, w.config(fmt.Sprintf("running-%d", i)))
		must(t, err)
		devs[i] = d
		defer d.Close(ctx)
	}
	w.announceStatus(eps, minBatch, 0, 0)
	before := w.inbox()
	var runRefusal string
	for i, d := range devs {
		if _, err := d.UploadSearches(ctx, w.day, w.searchesOf(w.day)); err != nil {
			if !errors.Is(err, prio3.ErrSettingsWeaker) {
				t.Fatalf("running device %d: %v, want a refusal for weaker settings", i, err)
			}
			runRefusal = err.Error()
		}
	}
	sealedRunning := w.inbox() - before
	var counted uint64
	for _, d := range devs {
		counted += d.Stats().SettingsWeaker
	}
	// control: the defaults again; the same devices seal the next day
	w.announce(eps, minBatch)
	before = w.inbox()
	for i, d := range devs {
		if _, err := d.UploadSearches(ctx, w.day+1, w.searchesOf(w.day+1)); err != nil {
			t.Errorf("control: running device %d: %v", i, err)
		}
	}
	sealedControl := w.inbox() - before

	fmt.Printf("ATTACK prio3-status-downgrade: the leader operator's key announces ε = 1, min 100 with the exact status rule (ε_c = 0): %d of %d new devices sealed a report; status ε_c = 50: %d of %d; devices opened under ε_c = 0.1, then re-announced the exact rule: %d of %d sealed (%d refusals counted in Device.Stats); control, ε_c = 0.1, δ = 1e-6 again: %d of %d sealed\n",
		sealedExact, n, sealed50, n, sealedRunning, n, counted, sealedControl, n)
	if sealedExact+sealed50+sealedRunning != 0 {
		t.Fatalf("devices sealed %d + %d + %d reports under a weakened status rule", sealedExact, sealed50, sealedRunning)
	}
	if sealedControl != n || counted != n {
		t.Fatalf("control: %d of %d sealed, %d refusals counted", sealedControl, n, counted)
	}
	for _, c := range []struct{ ref, param, field string }{
		{refExact, "status noise", "Config.AllowExactStatus"}, {ref50, "status epsilon", "Config.MaxStatusEpsilon"},
		{runRefusal, "status noise", "Config.AllowExactStatus"},
	} {
		if !strings.Contains(c.ref, c.param) || !strings.Contains(c.ref, c.field) {
			t.Fatalf("refusal %q does not name %s and %s", c.ref, c.param, c.field)
		}
	}
	t.Logf("refusal: %s", ref50)
}
