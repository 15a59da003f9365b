package tests

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

// TestAttackPipelineAnnouncementForgery: someone other than the aggregator
// operator answers the clients' requests on protocol.PipelineSubject
// (crowdlog.pipeline) with pipelines of its choosing. With the NATS
// permissions of infra/natsauth only the aggregator's credential may
// answer there — so the forger is a holder of that credential (a second
// process given it, a stolen NKey seed) or whoever runs nats-server, who
// can give any account any permission; this test runs on an embedded
// server without permissions (the control: everyone can answer), which
// is the same position. The forger signs its answers with a key of its
// own.
//
//   - alone: the aggregator that consumes the reports (started as the
//     README starts it, query FT_u k = 5, but without --nats) does not
//     announce; the forger announces a query pipeline that agrees with
//     the device's K and policy (dp-u, k = 5, ε = 50: another definition,
//     another digest). Before: the device adopts the forged digest and
//     seals its reports for it. After: New refuses with
//     ErrAnnouncementSignature; nothing is sent.
//   - beside: a real aggregator process (same pipeline, --nats, signing
//     with aggregator-sign.key) announces too, and the forger announces a
//     k = 1 query pipeline. Before: New refuses to start (the processes
//     disagree): any answerer keeps every device from reporting. After:
//     the forged answer is ignored (logged) and the device seals for the
//     operator's digest.
func TestAttackPipelineAnnouncementForgery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const epoch, k = "forgery-e1", 5
	d := startDeploymentWith(t, ctx, epoch, func(d *deployment) []string {
		args := readmeAggregateArgs(t, d)
		if i := slices.Index(args, "--nats"); i >= 0 {
			args = slices.Delete(args, i, i+2)
		}
		return args
	})
	pipelineFile := "../testdata/pipelines/query-ftu-k5.yaml"
	real, err := runner.PipelineDigest(pipelineFile)
	if err != nil {
		t.Fatal(err)
	}

	// the forger: its own signing key, its own answers
	_, forgerKey, _ := ed25519.GenerateKey(rand.Reader)
	fnc, err := natsconn.Connect(d.nats, "forger")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fnc.Close)
	var forgedMu sync.Mutex
	var forged []pipelinespec.Spec
	setForged := func(s []pipelinespec.Spec) { forgedMu.Lock(); forged = s; forgedMu.Unlock() }
	forgedAnswer := func(m *nats.Msg) {
		forgedMu.Lock()
		forged := forged
		forgedMu.Unlock()
		signed, err := pipelinespec.SignPipelines(forgerKey, "forger", forged)
		if err != nil {
			t.Error(err)
			return
		}
		a := pipelinespec.Announcement{Process: "forger", Signed: signed}
		for _, s := range forged {
			a.Pipelines = append(a.Pipelines, s.Canonical())
		}
		b, _ := json.Marshal(a)
		m.Respond(b)
	}
	sub, err := fnc.Subscribe(protocol.PipelineSubject, forgedAnswer)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := fnc.Flush(); err != nil {
		t.Fatal(err)
	}

	states := t.TempDir()
	device := func(name string) (*ingest.Device, error) {
		return ingest.New(ctx, ingest.Config{StateDir: filepath.Join(states, name), NATS: d.nats, KeysDir: d.keys,
			Epoch: epoch, Policy: star.FTu, K: k, App: apps.QueryAppName, PipelineWait: 20 * time.Second})
	}
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	arts := []apps.Artifact{{Primary: "made up weather", Secondary: "made up weather", Time: at}, {Primary: "made up news", Secondary: "made up news", Time: at.Add(time.Second)}}

	// arm 1: the forger alone
	alone := pipelinespec.Spec{App: "query", Policy: "dp-u", ShamirK: k,
		DP: &pipelinespec.DP{Epsilon: 50, Delta: 1e-6, D: 1, Users: 1000, CountShare: 0.5, Slack: 1, Lambda: 0.1}}
	setForged([]pipelinespec.Spec{alone})
	fd := alone.Digest()
	sentForged := 0
	dev, err := device("alone")
	if err == nil {
		down, derr := dev.Downstream(ctx, apps.QueryAppName)
		if derr != nil {
			t.Fatal(derr)
		}
		if down.Pipeline == fd {
			n, serr := dev.Submit(ctx, apps.QueryAppName, arts...)
			if serr != nil {
				t.Fatal(serr)
			}
			sentForged = n
		}
		dev.Close(ctx)
	}
	refusedAlone := errors.Is(err, ingest.ErrAnnouncementSignature)
	fmt.Printf("ATTACK pipeline-announcement-forgery: forger alone (dp-u k=5 eps=50, digest %x…): device started=%v, reports sealed for the forged digest=%d, refused with ErrAnnouncementSignature=%v\n",
		fd[:4], err == nil, sentForged, refusedAlone)
	if sentForged != 0 || !refusedAlone {
		t.Errorf("the device configured itself from a forged announcement: started %v, %d reports sealed for the forged digest; err %v", err == nil, sentForged, err)
	} else {
		t.Logf("refused: %v", err)
	}

	// arm 2: a real aggregator process announces, signing with the
	// operator's key; the forger announces k = 1 beside it
	o := aggregator.DefaultOptions()
	o.Kafka, o.KeyPaths, o.PipelineFiles, o.Group = []string{d.kafka}, []string{filepath.Join(d.keys, keydir.AggregatorKey)}, []string{pipelineFile}, "forgery-announce"
	o.NATS.URL = d.nats
	svc, err := runner.NewAggregator(o, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(sctx) }()
	t.Cleanup(func() { stop(); <-done })
	beside := pipelinespec.Spec{App: "query", Policy: "ft-u", ShamirK: 1}
	setForged([]pipelinespec.Spec{beside})
	// the real process announces once it has joined its group: wait
	// until two processes answer (unverified, as an observer hears them)
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		down, err := ingest.FetchDownstream(ctx, fnc, time.Second, real, apps.QueryAppName, epoch)
		if err == nil && down.Processes >= 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the real aggregator process does not announce within 60 s (%v)", err)
		}
	}
	var besideErr error
	var sealed [32]byte
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		dev, besideErr = device("beside")
		if besideErr == nil {
			down, err := dev.Downstream(ctx, apps.QueryAppName)
			dev.Close(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sealed = down.Pipeline
			break
		}
		if !errors.Is(besideErr, ingest.ErrAnnouncementSignature) {
			break // the real process answered (and disagreed, before the fix)
		}
	}
	fmt.Printf("ATTACK pipeline-announcement-forgery: forger beside the operator's aggregator (ft-u k=1): device started=%v, sealing for the operator's digest=%v, forged digest=%v\n",
		besideErr == nil, sealed == real, sealed == beside.Digest())
	if besideErr != nil || sealed != real {
		t.Errorf("beside the real aggregator the forged k = 1 answer decided: started %v (%v), sealing %x", besideErr == nil, besideErr, sealed[:4])
	}
}
