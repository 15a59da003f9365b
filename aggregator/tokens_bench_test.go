package aggregator

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol/arc"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/protocol/token"
)

// BenchmarkApplyBundledLogTokens is the cost of report tokens on real
// data, on the path of BenchmarkApplyBundledLog (Apply: HPKE peel, parse,
// verified aggregation): the query reports (FT_u, k = 5) of the first 50
// users of the bundled AOL log, applied alternately without tokens and
// with a report token each (ReportKeys set: nonce check, spent set, one
// VOPRF evaluation per report).
func BenchmarkApplyBundledLogTokens(b *testing.B) {
	const users = 50
	key, _ := onion.GenerateKeyPair(1)
	reportKey, err := token.GenerateKey(token.KindReport, "e1")
	if err != nil {
		b.Fatal(err)
	}
	reports := bundledReports(b, users)
	plain := make([][]byte, len(reports))
	for i, r := range reports {
		plain[i] = wrap(b, key, r)
	}
	const batch = 1000
	for lo := 0; lo < len(reports); lo += batch {
		hi := min(lo+batch, len(reports))
		nonces := make([][32]byte, 0, hi-lo)
		for _, r := range reports[lo:hi] {
			u, _ := r.UnsignedBytes()
			nonces = append(nonces, token.ReportNonce(u))
		}
		for i, t := range mint(b, reportKey, nonces...) {
			reports[lo+i].Token, _ = t.MarshalBinary()
		}
	}
	paid := make([][]byte, len(reports))
	for i, r := range reports {
		paid[i] = wrap(b, key, r)
	}
	run := func(msgs [][]byte, tokens bool) (time.Duration, int64) {
		start := time.Now()
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		if tokens {
			p.ReportKeys = keysOf(reportKey)
		}
		for _, m := range msgs {
			p.Apply(Message{Value: m})
		}
		if len(p.Stats.Dropped) != 0 {
			b.Fatalf("tokens=%v: dropped %v", tokens, p.Stats.Dropped)
		}
		return time.Since(start), p.Stats.Decrypted
	}
	b.ResetTimer()
	var with, without time.Duration
	var dec1, dec2 int64
	applied := 0
	for i := 0; i < b.N; i += len(reports) {
		d1, x1 := run(paid, true)
		d2, x2 := run(plain, false)
		with, without, dec1, dec2 = with+d1, without+d2, x1, x2
		applied += len(reports)
	}
	if dec1 != dec2 {
		b.Fatalf("decrypted %d with tokens, %d without", dec1, dec2)
	}
	b.ReportMetric(float64(len(reports)), "reports")
	b.ReportMetric(float64(dec1), "decrypted")
	b.ReportMetric(float64(with.Nanoseconds())/float64(applied), "tokens-ns/report")
	b.ReportMetric(float64(without.Nanoseconds())/float64(applied), "notokens-ns/report")
}

// BenchmarkApplyBundledLogARC is the cost of FT_u with ARC on real data:
// the query reports (FT_u, k = 5) of the first 20 users of the bundled
// log, each user with one ARC credential, each report sealed at the x of
// its presentation tag (star.SealARC) and paying a report token, applied
// alternately with ReportKeys and ARCKeys set (token + one presentation
// verification per (group, x)) and with both nil (the trailer is parsed
// and ignored).
func BenchmarkApplyBundledLogARC(b *testing.B) {
	const users, k = 20, 5
	key, _ := onion.GenerateKeyPair(1)
	reportKey, _ := token.GenerateKey(token.KindReport, "e1")
	arcKey, _ := arc.GenerateKey(rand.Reader)
	var reports []*star.Report
	sealings := map[string]star.Sealing{}
	n, pairs := 0, 0
	_, err := aol.ReadUsers("../testdata/aol-top1000.tsv.gz", func(u aol.User) error {
		if n++; n > users {
			return nil
		}
		cred := credential(b, arcKey)
		type pt struct{ pres, tag []byte }
		mine := map[string]pt{}
		for _, a := range (apps.QueryApp{}).Mine(u.Records) {
			s, ok := sealings[a.Primary]
			if !ok {
				var err error
				if s, err = star.DeriveSealing(star.LocalOmega("query", "e1", a.Primary), "query", "e1", star.FTu, k); err != nil {
					return err
				}
				sealings[a.Primary] = s
			}
			p, ok := mine[a.Primary]
			if !ok {
				p.pres, p.tag = present(b, cred, &s)
				mine[a.Primary] = p
				pairs++
			}
			r, err := s.SealARC(p.tag, a.Primary, a.Secondary)
			if err != nil {
				return err
			}
			u, _ := r.UnsignedBytes()
			r.Token, _ = mint(b, reportKey, token.ReportNonce(u))[0].MarshalBinary()
			r.Presentation = p.pres
			reports = append(reports, r)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([][]byte, len(reports))
	for i, r := range reports {
		msgs[i] = wrap(b, key, r)
	}
	run := func(on bool) (time.Duration, int64) {
		start := time.Now()
		p := NewPartition(0, 1, []*onion.KeyPair{key})
		if on {
			p.ReportKeys = keysOf(reportKey)
			p.ARCKeys = func(string) (*arc.PrivateKey, error) { return arcKey, nil }
		}
		for _, m := range msgs {
			p.Apply(Message{Value: m})
		}
		if len(p.Stats.Dropped) != 0 {
			b.Fatalf("on=%v: dropped %v", on, p.Stats.Dropped)
		}
		return time.Since(start), p.Stats.Decrypted
	}
	b.ResetTimer()
	var with, without time.Duration
	var dec1, dec2 int64
	applied := 0
	for i := 0; i < b.N; i += len(reports) {
		d1, x1 := run(true)
		d2, x2 := run(false)
		with, without, dec1, dec2 = with+d1, without+d2, x1, x2
		applied += len(reports)
	}
	if dec1 != dec2 {
		b.Fatalf("decrypted %d with checks, %d without", dec1, dec2)
	}
	b.ReportMetric(float64(len(reports)), "reports")
	b.ReportMetric(float64(pairs), "presentations")
	b.ReportMetric(float64(dec1), "decrypted")
	b.ReportMetric(float64(with.Nanoseconds())/float64(applied), "checked-ns/report")
	b.ReportMetric(float64(without.Nanoseconds())/float64(applied), "unchecked-ns/report")
}
