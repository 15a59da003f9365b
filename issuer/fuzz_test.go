package issuer

import (
	"slices"
	"testing"
)

// FuzzParseCounter: any value of the counters bucket (another writer may
// reach it: the PubAck-reflection row of docs/threat-model.md) parses or
// is ErrCorruptCounter, never panics; what parses re-encodes to a value
// that parses to the same counter.
func FuzzParseCounter(f *testing.F) {
	var id [32]byte
	id[3] = 9
	f.Add([]byte("12"))
	f.Add(counter{used: 3}.charge(2, id).encode())
	f.Add([]byte(`{"stream":"KV_crowdlog-issuer-counters","seq":1}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		c, err := parseCounter(v)
		if err != nil {
			return
		}
		if c.used < 0 || len(c.recent) > RetryRecords {
			t.Fatalf("parsed %d with %d records", c.used, len(c.recent))
		}
		d, err := parseCounter(c.encode())
		if err != nil || d.used != c.used || !slices.Equal(d.recent, c.recent) {
			t.Fatalf("re-encoding %q: %+v, %v", c.encode(), d, err)
		}
	})
}
