package simulate

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/crowdlog/crowdlog/ingest/aol"
)

// TestZipfLog: the synthetic log is reproducible byte for byte, reads back
// through the AOL reader with every line well-formed and as many AnonIDs as
// asked, and a different seed gives a different log.
func TestZipfLog(t *testing.T) {
	var a, b, c bytes.Buffer
	o := ZipfLogOptions{Users: 300, Seed: 5}
	if err := WriteZipfLog(&a, o); err != nil {
		t.Fatal(err)
	}
	if err := WriteZipfLog(&b, o); err != nil {
		t.Fatal(err)
	}
	o.Seed = 6
	if err := WriteZipfLog(&c, o); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Fatalf("same seed equal: %v, other seed equal: %v", bytes.Equal(a.Bytes(), b.Bytes()), bytes.Equal(a.Bytes(), c.Bytes()))
	}
	path := filepath.Join(t.TempDir(), "zipf.tsv.gz")
	if err := os.WriteFile(path, a.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	users, records := 0, 0
	st, err := aol.ReadUsers(path, func(u aol.User) error {
		users++
		records += len(u.Records)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if users != 300 || records < 300 || st.Bad != 0 {
		t.Fatalf("read back %d users, %d records, stats %+v", users, records, st)
	}
}
