package aggregator

import (
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
)

// BenchmarkApplyBundledLog is the verification overhead on real data: the
// query reports (FT_u, k = 5) of the first 200 users of the bundled AOL log
// — most artifacts never reach k, some reach it with many more reports —
// applied with and without share verification, alternately, over the same
// messages. ω comes from star.LocalOmega (hash mode) to keep the setup
// short; it does not change the aggregator's work.
func BenchmarkApplyBundledLog(b *testing.B) {
	key, _ := onion.GenerateKeyPair(1)
	msgs := bundledLayers(b, key, 200)
	run := func(noVerify bool) (time.Duration, int64) {
		start := time.Now()
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		p.noVerify = noVerify
		for _, m := range msgs {
			p.Apply(Message{Value: m})
		}
		return time.Since(start), p.Stats.Decrypted
	}
	b.ResetTimer()
	var with, without time.Duration
	var dec1, dec2 int64
	reports := 0
	for i := 0; i < b.N; i += len(msgs) {
		d1, x1 := run(false)
		d2, x2 := run(true)
		with, without, dec1, dec2 = with+d1, without+d2, x1, x2
		reports += len(msgs)
	}
	if dec1 != dec2 {
		b.Fatalf("decrypted %d with verification, %d without", dec1, dec2)
	}
	b.ReportMetric(float64(len(msgs)), "reports")
	b.ReportMetric(float64(dec1), "decrypted")
	b.ReportMetric(float64(with.Nanoseconds())/float64(reports), "verify-ns/report")
	b.ReportMetric(float64(without.Nanoseconds())/float64(reports), "noverify-ns/report")
	b.ReportMetric(100*float64(without)/float64(with), "verify-%")
}

// bundledReports is the query reports (FT_u, k = 5, epoch e1) of the
// first users of the bundled AOL log in log order; ω comes from
// star.LocalOmega (hash mode).
func bundledReports(t testing.TB, users int) []*star.Report {
	const k = 5
	var reports []*star.Report
	sealings := map[string]star.Sealing{}
	n := 0
	_, err := aol.ReadUsers("../testdata/aol-top1000.tsv.gz", func(u aol.User) error {
		if n++; n > users {
			return nil
		}
		sec, _ := star.NewUserSecret()
		for _, a := range (apps.QueryApp{}).Mine(u.Records) {
			s, ok := sealings[a.Primary]
			if !ok {
				var err error
				if s, err = star.DeriveSealing(star.LocalOmega("query", "e1", a.Primary), "query", "e1", star.FTu, k); err != nil {
					return err
				}
				sealings[a.Primary] = s
			}
			r, err := s.Seal(&sec, a.Primary, a.Secondary)
			if err != nil {
				return err
			}
			reports = append(reports, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return reports
}

// bundledLayers is bundledReports(users), each wrapped in key's onion
// layer.
func bundledLayers(t testing.TB, key *onion.KeyPair, users int) [][]byte {
	reports := bundledReports(t, users)
	msgs := make([][]byte, len(reports))
	for i, r := range reports {
		msgs[i] = wrap(t, key, r)
	}
	return msgs
}
