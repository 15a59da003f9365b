package kafka

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/protocol"
)

// TestEnsureLogAppendTime: kfake takes message.timestamp.type=LogAppendTime
// on reports and describes it back, idempotently; it still keeps a
// producer's timestamp (here −1 ms, read back by kafka-go as the zero
// time), which is why the aggregator refuses control records without a
// timestamp on its own.
func TestEnsureLogAppendTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Start(ctx, t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := EnsureTopics(ctx, b.Addr, 1, protocol.ReportsTopic); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := EnsureLogAppendTime(ctx, b.Addr, protocol.ReportsTopic); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := TimestampType(ctx, b.Addr, protocol.ReportsTopic); err != nil || got != "LogAppendTime" {
		t.Fatalf("message.timestamp.type of reports: %q, %v", got, err)
	}
	if err := produce(ctx, b.Addr, protocol.ReportsTopic, kafkago.Message{Value: []byte("x"), Time: time.UnixMilli(-1)}); err != nil {
		t.Fatal(err)
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{b.Addr}, Topic: protocol.ReportsTopic, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kfake with LogAppendTime: a record produced at −1 ms reads back at %v (zero: %v)", m.Time, m.Time.IsZero())
}
