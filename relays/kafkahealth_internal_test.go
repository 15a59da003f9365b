package relays

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestKafkaReason: kafka-go's errors map to the refusal reasons, also
// inside a kafka.WriteErrors and wrapped.
func TestKafkaReason(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{kafka.TopicAuthorizationFailed, KafkaRefusedAuthorization},
		{fmt.Errorf("write: %w", kafka.SASLAuthenticationFailed), KafkaRefusedAuthorization},
		{kafka.WriteErrors{nil, kafka.UnknownTopicOrPartition}, KafkaRefusedUnknownTopic},
		{kafka.MessageSizeTooLarge, KafkaRefusedTooLarge},
		{context.DeadlineExceeded, KafkaRefusedTimeout},
		{kafka.RequestTimedOut, KafkaRefusedTimeout},
		{errors.New("injected"), KafkaRefusedOther},
	} {
		if got := kafkaReason(c.err); got != c.want {
			t.Errorf("kafkaReason(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// TestKafkaHealthPerTopic: refusals persist per writer — a writer that
// accepts does not reset another's run; the backoff doubles to
// MaxKafkaBackoff; one accepted call at the refused writer ends the alarm.
func TestKafkaHealthPerTopic(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &Relay{Stats: &Stats{}, KafkaRefusalsError: 3, KafkaRefusalsAfter: time.Hour}
	mx := newMetrics(nil, "b", log)
	base := 100 * time.Millisecond
	var last time.Duration
	for i := 0; i < 12; i++ {
		last = r.kafkaRefused(writerPrio3, kafka.UnknownTopicOrPartition, 2, base, mx, log)
		r.kafkaAccepted(writerReports, mx, log) // another topic is fine
		if i == 1 && r.KafkaErr() != nil {
			t.Fatalf("alarm after 2 refusals: %v", r.KafkaErr())
		}
	}
	if r.KafkaErr() == nil {
		t.Fatal("no alarm after 12 refusals at one writer while another accepted")
	}
	if last != MaxKafkaBackoff {
		t.Errorf("backoff after 12 refusals %v, want %v", last, MaxKafkaBackoff)
	}
	if got := r.Stats.KafkaRefused.Load(); got != 24 {
		t.Errorf("KafkaRefused = %d, want 24", got)
	}
	r.kafkaAccepted(writerPrio3, mx, log)
	if err := r.KafkaErr(); err != nil {
		t.Errorf("alarm after an accepted call: %v", err)
	}
	if d := r.kafkaRefused(writerPrio3, kafka.UnknownTopicOrPartition, 1, base, mx, log); d != base {
		t.Errorf("first backoff of a new run %v, want %v", d, base)
	}
}
