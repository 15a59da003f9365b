package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/infra/natsconn"
	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/pipelines/runner"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/pipelinespec"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// oldPipeline is the definition the operator served before changing it:
// a loose DP release of queries (ε = 50) that seals as the README's
// query FT_u k = 5 does, so a device configured for the README agrees
// with both.
const oldPipeline = `name: query-dpu-loose
app:
  name: query
policy:
  kind: dp-u
  shamir_k: 5
  epsilon: 50
  d: 1
  users: 1000
`

// TestAttackPipelineAnnouncementReplay: a forger who recorded a genuine
// signed answer on protocol.PipelineSubject (crowdlog.pipeline) replays it
// after the operator changed the definition. The forger holds no signing
// key: it is whoever may answer there (a holder of the aggregator's NATS
// credential, whoever runs nats-server; on this embedded server without
// permissions, the control, anyone) and records by subscribing to the
// devices' reply inboxes.
//
// The operator first runs an aggregator process (the real signing code,
// aggregator-sign.key) that serves and announces oldPipeline; a device
// configured as the README's (query, FT_u, k = 5) starts and adopts it,
// while the forger records the answer to that device's request. The
// operator then withdraws the definition: the announcing process stops,
// and the aggregator that consumes reports (the README's, query FT_u
// k = 5, started without --nats) serves only the new one. The forger
// answers every request with the recorded bytes. Before: a new device
// adopts the withdrawn definition's digest and seals every report for it
// (dropped by the aggregator as pipeline-mismatch, or counted under the
// loose ε if the definition were still decrypted somewhere). After: the
// answer echoes another request's nonce; New refuses with
// ErrAnnouncementStale and nothing is sent.
func TestAttackPipelineAnnouncementReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const epoch, k = "replay-e1", 5
	d := startDeploymentWith(t, ctx, epoch, func(d *deployment) []string {
		args := readmeAggregateArgs(t, d)
		if i := slices.Index(args, "--nats"); i >= 0 {
			args = slices.Delete(args, i, i+2)
		}
		return args
	})
	oldFile := filepath.Join(t.TempDir(), "query-dpu-loose.yaml")
	if err := os.WriteFile(oldFile, []byte(oldPipeline), 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := runner.PipelineDigest(oldFile)
	if err != nil {
		t.Fatal(err)
	}
	current, err := runner.PipelineDigest("../testdata/pipelines/query-ftu-k5.yaml")
	if err != nil {
		t.Fatal(err)
	}

	// the forger records every announcement answer that passes through
	// the devices' inboxes
	fnc, err := natsconn.Connect(d.nats, "forger")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fnc.Close)
	var recMu sync.Mutex
	var recorded []byte
	rec, err := fnc.Subscribe("_INBOX.>", func(m *nats.Msg) {
		var a pipelinespec.Announcement
		if json.Unmarshal(m.Data, &a) != nil || a.Process == "" || len(a.Signed) == 0 {
			return
		}
		recMu.Lock()
		defer recMu.Unlock()
		if recorded == nil {
			recorded = slices.Clone(m.Data)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fnc.Flush(); err != nil {
		t.Fatal(err)
	}

	// the operator's earlier definition, announced and signed by a real
	// aggregator process
	o := aggregator.DefaultOptions()
	o.Kafka, o.KeyPaths, o.PipelineFiles, o.Group = []string{d.kafka}, []string{filepath.Join(d.keys, keydir.AggregatorKey)}, []string{oldFile}, "replay-old"
	o.NATS.URL = d.nats
	svc, err := runner.NewAggregator(o, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(sctx) }()
	t.Cleanup(func() { stop(); <-done })

	states := t.TempDir()
	device := func(name string) (*ingest.Device, error) {
		return ingest.New(ctx, ingest.Config{StateDir: filepath.Join(states, name), NATS: d.nats, KeysDir: d.keys,
			Epoch: epoch, Policy: star.FTu, K: k, App: apps.QueryAppName, PipelineWait: 20 * time.Second})
	}
	// a device while the old definition is served: it adopts it (the
	// process announces once it has joined its group: retry)
	var early [32]byte
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		dev, err := device("early")
		if err == nil {
			down, derr := dev.Downstream(ctx, apps.QueryAppName)
			dev.Close(ctx)
			if derr != nil {
				t.Fatal(derr)
			}
			early = down.Pipeline
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no device starts while the old definition is announced within 90 s: %v", err)
		}
	}
	if early != old {
		t.Fatalf("the early device seals for %x…, the old definition is %x…", early[:4], old[:4])
	}
	recMu.Lock()
	recording := recorded
	recMu.Unlock()
	if recording == nil {
		t.Fatal("the forger recorded no announcement answer from the device's inbox")
	}
	rec.Unsubscribe()

	// the operator withdraws the old definition: its announcing process
	// stops; wait until nobody answers
	stop()
	<-done
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := fnc.Request(protocol.PipelineSubject, []byte(`{}`), time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the old aggregator process still answers 60 s after it stopped (%v)", err)
		}
	}

	// the forger replays the recorded answer to every request
	sub, err := fnc.Subscribe(protocol.PipelineSubject, func(m *nats.Msg) { m.Respond(recording) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := fnc.Flush(); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	arts := []apps.Artifact{{Primary: "made up weather", Secondary: "made up weather", Time: at}, {Primary: "made up news", Secondary: "made up news", Time: at.Add(time.Second)}}
	sealedOld := 0
	dev, err := device("late")
	if err == nil {
		down, derr := dev.Downstream(ctx, apps.QueryAppName)
		if derr != nil {
			t.Fatal(derr)
		}
		if down.Pipeline == old {
			n, serr := dev.Submit(ctx, apps.QueryAppName, arts...)
			if serr != nil {
				t.Fatal(serr)
			}
			sealedOld = n
		}
		dev.Close(ctx)
	}
	stale := errors.Is(err, ingest.ErrAnnouncementStale)
	fmt.Printf("ATTACK pipeline-announcement-replay: recorded genuine answer for the withdrawn definition (dp-u k=5 eps=50, digest %x…; now served: %x…) replayed: device started=%v, reports sealed for the withdrawn digest=%d of %d, refused with ErrAnnouncementStale=%v\n",
		old[:4], current[:4], err == nil, sealedOld, len(arts), stale)
	if sealedOld != 0 || !stale {
		t.Errorf("the device configured itself from a replayed announcement: started %v, %d of %d reports sealed for the withdrawn digest; err %v", err == nil, sealedOld, len(arts), err)
	} else {
		t.Logf("refused: %v", err)
	}
}
