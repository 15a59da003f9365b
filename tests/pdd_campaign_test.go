package tests

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/coordinator"
	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/infra/natsserver"
	"github.com/crowdlog/crowdlog/ingest/keywords"
	"github.com/crowdlog/crowdlog/ingest/pdd"
)

// TestPDDRegisterChecksCampaign: a PDD client refuses to start when the
// coordinator runs another campaign or another keyword list than the
// client's (its vector slots would mean other keywords, its pings would be
// refused), with an error naming the value; the client of the right
// campaign and list registers. Real coordinator on embedded NATS and kfake.
func TestPDDRegisterChecksCampaign(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	kb, err := kafka.Start(ctx, filepath.Join(dir, "kafka"), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kb.Close)
	if err := kafka.EnsureTopics(ctx, kb.Addr, 1, "vectors"); err != nil {
		t.Fatal(err)
	}
	ns, err := natsserver.Start(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := natsconn.Connect(ns.URL, "test-pdd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	list, err := keywords.Parse(strings.NewReader("flu\nfever\ncough\n"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := keywords.Parse(strings.NewReader("flu\nfever\nsneeze\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := &coordinator.Coordinator{NC: nc, Brokers: []string{kb.Addr}, Campaign: coordinator.Campaign{Name: "flu", List: list, ListName: "test", GroupSize: 3, Delay: 1}}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tr := &pdd.Transport{NC: nc}
	if _, err := pdd.Register(ctx, tr, "flu", list, ""); err != nil {
		t.Fatalf("the campaign's own client: %v", err)
	}
	_, err = pdd.Register(ctx, tr, "cold", list, "")
	if !errors.Is(err, pdd.ErrCampaignMismatch) || !strings.Contains(err.Error(), `campaign "cold", the coordinator runs "flu"`) {
		t.Fatalf("another campaign: %v, want ErrCampaignMismatch naming both", err)
	}
	t.Logf("another campaign: %v", err)
	_, err = pdd.Register(ctx, tr, "flu", other, "")
	if !errors.Is(err, pdd.ErrListMismatch) || !strings.Contains(err.Error(), "coordinator: test, L=3") {
		t.Fatalf("another keyword list: %v, want ErrListMismatch naming the coordinator's list", err)
	}
	t.Logf("another keyword list: %v", err)
}
