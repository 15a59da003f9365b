package simulate

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/ingest/keywords"
)

// ZipfLogOptions configure WriteZipfLog. Zero fields take the defaults.
type ZipfLogOptions struct {
	// Users is the number of AnonIDs (default 2,000).
	Users int
	// Seed makes the log reproducible (default 1).
	Seed uint64
	// Exponent s > 1 of the Zipf law over the word list (default 1.1).
	Exponent float64
	// Repeat is the probability that a query re-issues one of the user's
	// earlier queries (navigational re-finding; default 0.4).
	Repeat float64
}

// WriteZipfLog writes a synthetic search log in the AOL TSV layout
// (header "AnonID Query QueryTime ItemRank ClickURL", no clicks), gzipped:
// the second log of docs/policies.md's DP comparison, made from public
// material only. Words are the embedded google-10000-english list in its
// frequency order; a query is one word (60%) or two (40%), each drawn from
// a Zipf law of exponent s over the list's ranks; a user issues
// ⌈e^{N(3, 1)}⌉ queries (median 20, heavy-tailed, at most 2,000), each one
// with probability Repeat a copy of an earlier query of the same user,
// an exponential gap (mean one hour) after the previous, from 2006-03-01.
// The same options give the same bytes. Errors: write errors only.
func WriteZipfLog(w io.Writer, o ZipfLogOptions) error {
	if o.Users <= 0 {
		o.Users = 2000
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Exponent <= 1 {
		o.Exponent = 1.1
	}
	if o.Repeat == 0 {
		o.Repeat = 0.4
	}
	words := keywords.Default().Words
	rng := rand.New(rand.NewPCG(o.Seed, 0x7a697066))
	zipf := rand.NewZipf(rng, o.Exponent, 1, uint64(len(words)-1))
	gz := gzip.NewWriter(w)
	gz.ModTime = time.Time{}
	bw := bufio.NewWriter(gz)
	fmt.Fprintln(bw, "AnonID\tQuery\tQueryTime\tItemRank\tClickURL")
	base := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	for u := range o.Users {
		n := min(2000, int(math.Ceil(math.Exp(3+rng.NormFloat64()))))
		t := base.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))
		var past []string
		for range n {
			var q string
			if len(past) > 0 && rng.Float64() < o.Repeat {
				q = past[rng.IntN(len(past))]
			} else {
				parts := []string{words[zipf.Uint64()]}
				if rng.Float64() < 0.4 {
					parts = append(parts, words[zipf.Uint64()])
				}
				q = strings.Join(parts, " ")
			}
			past = append(past, q)
			t = t.Add(time.Duration(rng.ExpFloat64() * float64(time.Hour)))
			fmt.Fprintf(bw, "%d\t%s\t%s\t\t\n", 100000+u, q, t.Format("2006-01-02 15:04:05"))
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("simulate: write the synthetic log: %w", err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("simulate: write the synthetic log: %w", err)
	}
	return nil
}
