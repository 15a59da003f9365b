package kafka

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/crowdlog/crowdlog/protocol"
)

// TestKgoAuthDeleteRecords: on a kfake broker with TLS, SASL and the ACL
// table, a franz-go client built with KgoOpts authenticates with the
// role's kafka-go credential (SCRAM-SHA-512 and SCRAM-SHA-256 bridged):
// the Prio3 leader's user lists prio3-uploads' offsets, but its
// DeleteRecords is refused (TOPIC_AUTHORIZATION_FAILED) unless the user
// also holds RolePrio3Delete, whose DeleteRecords moves the log start to
// the offset asked (3 of 5 records). A wrong password gets nothing.
func TestKgoAuthDeleteRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	srvTLS, caFile := testTLS(t, dir)
	admin := Credential{MechanismSCRAMSHA512, "admin", "admin-secret"}
	leader := Credential{MechanismSCRAMSHA512, "prio3-leader", "leader-secret"}
	deleter := Credential{MechanismSCRAMSHA256, "prio3-leader-d", "deleter-secret"}
	b, err := Config{Dir: filepath.Join(dir, "kafka"), Partitions: 1, TLS: srvTLS, Admin: &admin, ACLs: true,
		Users: []User{{RolePrio3Leader, leader}, {RolePrio3Leader, deleter}, {RolePrio3Delete, deleter}}}.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	authCtx := func(c Credential) context.Context {
		a, err := c.AuthConfig(caFile).Load()
		if err != nil {
			t.Fatal(err)
		}
		return WithAuth(ctx, a)
	}
	actx := authCtx(admin)
	if err := EnsureTopics(actx, b.Addr, 1, protocol.Prio3UploadsTopic); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := produce(actx, b.Addr, protocol.Prio3UploadsTopic, kafkago.Message{Key: []byte("c"), Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	client := func(c Credential) *kgo.Client {
		kc, err := kgo.NewClient(append(KgoOpts(authCtx(c)), kgo.SeedBrokers(b.Addr), kgo.RequestRetries(1))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(kc.Close)
		return kc
	}
	logStart := func(kc *kgo.Client) (int64, error) {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = protocol.Prio3UploadsTopic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = -2
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		resp, err := req.RequestWith(rctx, kc)
		if err != nil {
			return 0, err
		}
		p := resp.Topics[0].Partitions[0]
		return p.Offset, kerr.ErrorForCode(p.ErrorCode)
	}
	deleteBelow := func(kc *kgo.Client, off int64) (int64, error) {
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.TimeoutMillis = 10_000
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = protocol.Prio3UploadsTopic
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Offset = off
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		resp, err := req.RequestWith(rctx, kc)
		if err != nil {
			return 0, err
		}
		p := resp.Topics[0].Partitions[0]
		return p.LowWatermark, kerr.ErrorForCode(p.ErrorCode)
	}
	lc := client(leader)
	if lo, err := logStart(lc); err != nil || lo != 0 {
		t.Fatalf("the leader's user (SCRAM-SHA-512 through KgoOpts) lists the log start: %d, %v; want 0", lo, err)
	}
	if _, err := deleteBelow(lc, 3); err != kerr.TopicAuthorizationFailed {
		t.Fatalf("DeleteRecords without %s: %v, want %v", RolePrio3Delete, err, kerr.TopicAuthorizationFailed)
	}
	dc := client(deleter)
	if low, err := deleteBelow(dc, 3); err != nil || low != 3 {
		t.Fatalf("DeleteRecords with %s (SCRAM-SHA-256 through KgoOpts): low watermark %d, %v; want 3", RolePrio3Delete, low, err)
	}
	if lo, err := logStart(lc); err != nil || lo != 3 {
		t.Fatalf("log start after the deletion: %d, %v; want 3", lo, err)
	}
	if _, err := logStart(client(Credential{MechanismSCRAMSHA512, "prio3-leader", "wrong"})); err == nil {
		t.Fatal("a wrong password listed offsets")
	}
}
