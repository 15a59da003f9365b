package aggregator

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/tlstest"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// TestServiceSecureKafka runs the aggregator Service, the epoch control
// writers and the release's reader on a kfake broker with TLS,
// SASL/SCRAM-SHA-512 and the role ACL table on, each role with its own
// credential in its context (infra/kafka.WithAuth): relay b writes 12
// sealed reports (3 artifacts, k = 2, 4 users each), the operator opens
// the epoch, the aggregator decrypts them in its consumer group, the
// operator closes the epoch, and the release reads all 12 items and the
// closed markers; the release and the aggregator (no schedule) cannot
// write a control record. Every Kafka path
// of the service (partition count, group, readers, the decrypted writer,
// control records) must authenticate for this to pass.
func TestServiceSecureKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	srvTLS, caFile := tlstest.TLS(t, dir)
	const partitions = 2
	admin := infrakafka.Credential{Mechanism: infrakafka.MechanismSCRAMSHA512, User: "admin", Password: "admin-pw"}
	users := map[infrakafka.Role]infrakafka.Credential{
		infrakafka.RoleRelay:      {Mechanism: infrakafka.MechanismSCRAMSHA512, User: "relay-b", Password: "relay-pw"},
		infrakafka.RoleAggregator: {Mechanism: infrakafka.MechanismSCRAMSHA512, User: "aggregator", Password: "agg-pw"},
		infrakafka.RoleRelease:    {Mechanism: infrakafka.MechanismSCRAMSHA512, User: "release", Password: "rel-pw"},
		infrakafka.RoleOperator:   {Mechanism: infrakafka.MechanismSCRAMSHA512, User: "operator", Password: "op-pw"},
	}
	cfg := infrakafka.Config{Dir: filepath.Join(dir, "kafka"), Partitions: partitions, TLS: srvTLS, Admin: &admin, ACLs: true}
	for r, c := range users {
		cfg.Users = append(cfg.Users, infrakafka.User{Role: r, Credential: c})
	}
	kb, err := cfg.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer kb.Close()
	as := func(c infrakafka.Credential) context.Context {
		a, err := c.AuthConfig(caFile).Load()
		if err != nil {
			t.Fatal(err)
		}
		return infrakafka.WithAuth(ctx, a)
	}
	if err := infrakafka.EnsureTopics(as(admin), kb.Addr, partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
		t.Fatal(err)
	}
	brokers := []string{kb.Addr}
	aggCtx := as(users[infrakafka.RoleAggregator])
	opCtx := as(users[infrakafka.RoleOperator])

	onionKey, _ := onion.GenerateKeyPair(1)
	if err := onion.PrepareKeys([]*onion.KeyPair{onionKey}); err != nil {
		t.Fatal(err)
	}
	var msgs []kafkago.Message
	for a := range 3 {
		s := sealing(t, fmt.Sprintf("artifact %d", a), star.FTu, 2)
		for range 4 {
			u, _ := star.NewUserSecret()
			r, err := s.Seal(&u, fmt.Sprintf("artifact %d", a), "")
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, kafkago.Message{Key: onion.TagBucket(r.Tag), Value: wrap(t, onionKey, r)})
		}
	}
	if err := OpenEpoch(opCtx, brokers, nil, "query", "e1"); err != nil {
		t.Fatalf("open the epoch as the operator: %v", err)
	}
	w := infrakafka.NewWriterAuth(infrakafka.AuthFrom(as(users[infrakafka.RoleRelay])), kb.Addr, protocol.ReportsTopic)
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("relay b writes reports: %v", err)
	}
	w.Close()

	s := &Service{Brokers: brokers, Keys: []*onion.KeyPair{onionKey}, Logger: slog.New(slog.DiscardHandler),
		MaxWait: 20 * time.Millisecond, SessionTimeout: 6 * time.Second}
	sctx, stop := context.WithCancel(aggCtx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	for deadline := time.Now().Add(60 * time.Second); s.Reports.Load() < int64(len(msgs)); {
		if time.Now().After(deadline) {
			t.Fatalf("the aggregator counted %d of %d reports in 60 s over TLS and SASL", s.Reports.Load(), len(msgs))
		}
		select {
		case err := <-done:
			t.Fatalf("the aggregator stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := CloseEpoch(opCtx, brokers, nil, "query", "e1"); err != nil {
		t.Fatalf("close the epoch as the operator: %v", err)
	}
	tail := infrakafka.ReadTopic(as(users[infrakafka.RoleRelease]), brokers, protocol.DecryptedTopic, "release", slog.New(slog.DiscardHandler))
	defer tail.Stop()
	items, _ := readUntilClosed(t, tail, partitions)
	if len(items) != len(msgs) {
		t.Errorf("the release read %d items, want %d", len(items), len(msgs))
	}
	// the release's and the aggregator's (no schedule) credentials cannot
	// write the control records
	for _, r := range []infrakafka.Role{infrakafka.RoleRelease, infrakafka.RoleAggregator} {
		rctx, rcancel := context.WithTimeout(as(users[r]), 5*time.Second)
		if err := OpenEpoch(rctx, brokers, nil, "query", "e2"); err == nil {
			t.Errorf("the %s's credential opened an epoch", r)
		}
		rcancel()
	}
}
