package protocol

import "testing"

func TestSummaryBucket(t *testing.T) {
	for n, b := range map[uint64]uint64{0: 0, 1: 1, 2: 2, 3: 2, 4: 4, 7: 4, 8: 8, 1000: 512} {
		if SummaryBucket(n) != b {
			t.Fatalf("SummaryBucket(%d) = %d, want %d", n, SummaryBucket(n), b)
		}
	}
}
