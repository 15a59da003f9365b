package protocol

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/crowdlog/crowdlog/protocol/internal/testvec"
)

// Golden test vectors: protocol/testdata/golden-*.json hold
// every message type's encoding for fixed inputs, so a future client in any
// language can be checked against them. `go test ./protocol -run TestGolden
// -update` rewrites them; by default the test recomputes every value and
// compares. Values are hex unless the name ends in "_text" or "_json".

// TestGoldenDecrypted: the JSON messages of the decrypted topic and the
// epoch-close control message, as written by the aggregator.
func TestGoldenDecrypted(t *testing.T) {
	item := Decrypted{Kind: KindItem, App: "query", Epoch: "2006-03", Policy: "ft-u", K: 5, Pipeline: hex.EncodeToString(testvec.FixedBytes("pipeline", 32)),
		Tag: hex.EncodeToString(testvec.FixedBytes("tag", 32)), Report: hex.EncodeToString(testvec.FixedBytes("id", 16)),
		Unit: hex.EncodeToString(testvec.FixedBytes("unit", 16)), Item: "new york weather", Variant: "New York  Weather"}
	sum := Decrypted{Kind: KindSummary, App: "query", Epoch: "2006-03", Policy: "ft-u", K: 5,
		Summary: []SummaryRow{{Reports: 8, Shares: 4, Tags: 1}, {Reports: 1, Shares: 1, Tags: 812}}, Partition: 3, Partitions: 8}
	closed := Decrypted{Kind: KindClosed, App: "query", Epoch: "2006-03", Partition: 3, Partitions: 8}
	got := map[string]string{}
	for name, d := range map[string]Decrypted{"item_json": item, "summary_json": sum, "closed_json": closed} {
		b, _ := json.Marshal(&d)
		got[name] = string(b)
		if !*testvec.Update {
			back, err := ParseDecrypted(b)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if b2, _ := json.Marshal(back); !bytes.Equal(b, b2) {
				t.Errorf("%s does not round-trip", name)
			}
		}
	}
	b, _ := json.Marshal(EpochClose{App: "query", Epoch: "2006-03", Partitions: 8})
	got["epoch_close_json"] = string(b)
	testvec.Golden(t, "decrypted", got)
}
