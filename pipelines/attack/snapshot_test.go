package attack

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/aggregator"
	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// TestSnapshotFromState: reports written to a broker in a state directory,
// then an epoch close, are rebuilt by FromState (the stolen-directory
// attack) into exactly the pending groups a live partition held before the
// close; the snapshot file round-trips.
func TestSnapshotFromState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	state := t.TempDir()
	keysDir := filepath.Join(state, "keys")
	if err := keydir.EnsureKeys(keysDir); err != nil {
		t.Fatal(err)
	}
	key, err := onion.LoadKeyPair(filepath.Join(keysDir, keydir.AggregatorKey))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ikafka.Start(ctx, filepath.Join(state, "kafka"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := ikafka.EnsureTopics(ctx, b.Addr, 1, protocol.ReportsTopic); err != nil {
		t.Fatal(err)
	}
	live := aggregator.NewPartition(0, 1, []*onion.KeyPair{key})
	var msgs []kafka.Message
	for i := 1; i <= 6; i++ {
		s, _ := star.DeriveSealing(star.LocalOmega(fxApp, fxEpoch, strconv.Itoa(i)), fxApp, fxEpoch, star.FTu, 4)
		for u := 0; u < i; u++ {
			sec, _ := star.NewUserSecret()
			r, _ := s.Seal(&sec, "x", "x")
			rb, _ := r.MarshalBinary()
			l, _ := onion.SealLayer(key.PublicKey(), onion.Hop{Kind: onion.HopDeliver}, rb)
			live.Apply(aggregator.Message{Value: l})
			msgs = append(msgs, kafka.Message{Value: l})
		}
	}
	want := live.Pending()
	msgs = append(msgs, kafka.Message{Value: []byte(`{"app":"query","epoch":"2006-03","partitions":1}`),
		Headers: []kafka.Header{{Key: protocol.ControlHeader, Value: []byte("close-epoch")}}})
	w := ikafka.NewWriter(b.Addr, protocol.ReportsTopic)
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	ikafka.CloseWriter(w)
	b.Close()

	got, err := FromState(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 3 || !reflect.DeepEqual(got, want) {
		t.Fatalf("rebuilt %d pending groups, live partition had %d (want 3: 1, 2, 3 users at k = 4)", len(got), len(want))
	}
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, got); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSnapshot(&buf)
	if err != nil || !reflect.DeepEqual(back, got) {
		t.Fatalf("snapshot round trip: %v", err)
	}
}
