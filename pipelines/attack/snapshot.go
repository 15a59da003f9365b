// Package attack is the auditor's toolbox: it attacks a
// crowdlog deployment the way a thief of the aggregator (its memory, or the
// Kafka "reports" topic plus the aggregator key) or an analyst would, and
// measures what leaks. Its tests (`make test`) are the attack suite of
// docs/attacks.md; `crowdlog attack` runs the same code against a state
// directory or a snapshot file.
//
// A snapshot is the aggregator's pending state: one aggregator.PendingGroup
// per (tag, commitment) group below threshold, as JSON lines. It is what a
// compromised aggregator holds at any time, and what anyone holding the
// reports topic and the aggregator key can rebuild — including for closed
// epochs, because closing an epoch deletes the aggregator's memory but not
// the topic's records (docs/threat-model.md, "stolen state").
package attack

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/crowdlog/crowdlog/aggregator"
	ikafka "github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/infra/keydir"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
)

// WriteSnapshot writes groups as JSON lines.
func WriteSnapshot(w io.Writer, groups []aggregator.PendingGroup) error {
	enc := json.NewEncoder(w)
	for i := range groups {
		if err := enc.Encode(&groups[i]); err != nil {
			return err
		}
	}
	return nil
}

// ReadSnapshot reads WriteSnapshot's output. Errors name the bad line.
func ReadSnapshot(r io.Reader) ([]aggregator.PendingGroup, error) {
	var out []aggregator.PendingGroup
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var g aggregator.PendingGroup
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			return nil, fmt.Errorf("snapshot line %d: %w (write snapshots with `crowdlog attack snapshot`)", n, err)
		}
		out = append(out, g)
	}
	return out, sc.Err()
}

// Rebuild applies report-topic records (onion layers for the aggregator,
// in partition order) to fresh aggregator state and returns its pending
// groups. Control records (epoch closes) are skipped on purpose: the thief
// sees every report the topic still holds, also of closed epochs.
func Rebuild(records map[int][][]byte, keys []*onion.KeyPair) []aggregator.PendingGroup {
	var out []aggregator.PendingGroup
	ids := make([]int, 0, len(records))
	for id := range records {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		p := aggregator.NewPartition(id, len(records), keys)
		for _, v := range records[id] {
			p.Apply(aggregator.Message{Value: v})
		}
		out = append(out, p.Pending()...)
	}
	return out
}

// ReadReportsTopic reads every non-control record of the reports topic
// from the first offset to the current end, per partition.
func ReadReportsTopic(ctx context.Context, broker string) (map[int][][]byte, error) {
	n, err := ikafka.Partitions(ctx, broker, protocol.ReportsTopic)
	if err != nil {
		return nil, fmt.Errorf("attack: reports topic on %s: %w", broker, err)
	}
	out := map[int][][]byte{}
	for p := 0; p < n; p++ {
		recs, err := readPartition(ctx, broker, p)
		if err != nil {
			return nil, fmt.Errorf("attack: read reports partition %d: %w", p, err)
		}
		out[p] = recs
	}
	return out, nil
}

func readPartition(ctx context.Context, broker string, p int) ([][]byte, error) {
	conn, err := ikafka.Dialer(ctx).DialLeader(ctx, "tcp", broker, protocol.ReportsTopic, p)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	last, err := conn.ReadLastOffset()
	if err != nil {
		return nil, err
	}
	var out [][]byte
	next := int64(0)
	for next < last {
		if _, err := conn.Seek(next, kafka.SeekAbsolute); err != nil {
			return nil, err
		}
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		batch := conn.ReadBatch(1, 64<<20)
		for next < last {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			next = m.Offset + 1
			control := false
			for _, h := range m.Headers {
				if h.Key == protocol.ControlHeader {
					control = true
				}
			}
			if !control {
				out = append(out, m.Value)
			}
		}
		if err := batch.Close(); err != nil && next < last {
			return nil, err
		}
	}
	return out, nil
}

// FromState rebuilds the pending state from a stolen `crowdlog run --state`
// directory: it starts a Kafka-protocol broker (kfake) on DIR/kafka, reads
// the reports topic and opens it with every aggregator key in DIR/keys
// (aggregator*.key, current and rotated).
func FromState(ctx context.Context, dir string) ([]aggregator.PendingGroup, error) {
	keys, err := aggregatorKeys(filepath.Join(dir, "keys"))
	if err != nil {
		return nil, err
	}
	kdir := filepath.Join(dir, "kafka")
	if _, err := os.Stat(kdir); err != nil {
		return nil, fmt.Errorf("attack: %s has no broker data: %w (point --state at a `crowdlog run --state` directory)", dir, err)
	}
	b, err := ikafka.Config{Dir: kdir}.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("attack: start a broker on %s: %w", kdir, err)
	}
	defer b.Close()
	recs, err := ReadReportsTopic(ctx, b.Addr)
	if err != nil {
		return nil, err
	}
	return Rebuild(recs, keys), nil
}

func aggregatorKeys(dir string) ([]*onion.KeyPair, error) {
	all, _ := filepath.Glob(filepath.Join(dir, "aggregator*.key"))
	var paths []string
	for _, p := range all {
		if filepath.Base(p) != keydir.AggregatorSignKey { // Ed25519, signs announcements: no report key
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("attack: no aggregator*.key in %s", dir)
	}
	return keydir.LoadKeyPairs(paths)
}
