package truth

import "testing"

// The acceptance figure: ft-u k=5 on the bundled log releases 899 items.
func TestBundledFTu5(t *testing.T) {
	rows, err := Release("../../testdata/aol-top1000.tsv.gz", "ft-u", 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 899 {
		t.Fatalf("ft-u k=5: %d items, the issue states 899", len(rows))
	}
}
