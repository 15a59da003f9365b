package tests

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/issuer"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/tests/truth"
)

// TestIngestTokensStateDir: `crowdlog ingest --state DIR --enroll`
// (runner.Ingest) against a deployment with an issuer, run twice on the
// same log and epoch: the first run enrolls one identity per AnonID (kept
// in DIR/users/ID/identity.key) and pays tokens and one ARC credential
// each; the second finds every identity's state (the same key, the kept
// credential) and sends nothing, so the issuer issues nothing more; the
// FT_u release equals the one the raw log gives (tests/truth).
func TestIngestTokensStateDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const epoch, k, users = "tokens-e1", 2, 8
	d := startDeployment(t, ctx, epoch)
	if err := keydir.EnsureIssuerKeys(d.keys, epoch); err != nil {
		t.Fatal(err)
	}
	nc, err := natsconn.Connect(d.nats, "test-issuer")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	is, err := issuer.New(nc, d.keys, issuer.Limits{RandomnessTokens: 10000, ReportTokens: 10000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ictx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); is.Run(ictx) }()
	defer func() { stop(); <-done }()

	log := subset(t, users)
	state := t.TempDir()
	var sent []int64
	var issued []int64
	for range 2 {
		sum, err := runner.Ingest(ctx, runner.IngestConfig{Input: log, App: "query", Policy: "ft-u", K: k, Epoch: epoch,
			NATS: d.nats, KeysDir: d.keys, StateDir: state, Workers: 2, Enroll: true})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, sum.Reports)
		issued = append(issued, is.Issued.Load())
	}
	if sent[0] == 0 || sent[1] != 0 || issued[1] != issued[0] {
		t.Fatalf("reports sent by the two ingests %v, issuer's issued count after each %v; want [>0 0] and nothing issued by the second", sent, issued)
	}
	en, err := keydir.LoadEnrollment(d.keys)
	if err != nil || len(en) != users {
		t.Fatalf("enrolled %d identities (%v), want %d", len(en), err, users)
	}
	// every replayed user's state holds its identity and its credential
	creds, _ := filepath.Glob(filepath.Join(state, "users", "*", "arc-"+epoch))
	keys, _ := filepath.Glob(filepath.Join(state, "users", "*", ingest.IdentityKeyFile))
	if len(keys) != users || len(creds) == 0 || len(creds) > users {
		t.Fatalf("%d identity keys and %d ARC credentials in the devices' state, want %d keys and one credential per sending user", len(keys), len(creds), users)
	}
	want, err := truth.Release(log, "ft-u", k, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]truth.Row{}
	for _, it := range d.release(t, ctx, epoch, k) {
		got[it.Item] = truth.Row{Item: it.Item, Impressions: int(it.Impressions), Users: int(it.Users)}
	}
	if diff := truth.Diff(want, got, 5); len(diff) > 0 || len(want) == 0 {
		t.Fatalf("release after two ingests differs from the log's (%d items expected, %d released):\n%s", len(want), len(got), strings.Join(diff, "\n"))
	}
	t.Logf("%d reports sent with tokens, then 0; issuer issued %d (then nothing more); %d items released as the log says", sent[0], issued[0], len(got))
}
