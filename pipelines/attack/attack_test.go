package attack

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/crowdlog/crowdlog/aggregator"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/protocol/onion"
	"github.com/crowdlog/crowdlog/protocol/star"
	"github.com/crowdlog/crowdlog/release"
)

// The fixture: the bundled AOL log's users split in two halves by order of
// appearance. The even half is the target: its query artifacts are sealed
// (FT_u, k = 5) twice — once in the paper's hash mode (star.LocalOmega)
// and once with OPRF randomness under a fresh epoch key — and applied to an
// aggregator partition each. The odd half is the attacker's auxiliary log.
// Tests assert aggregate outcomes only, never individual queries.

const (
	bundledLog = "../../testdata/aol-top1000.tsv.gz"
	fxApp      = "query"
	fxEpoch    = "2006-03"
	fxK        = 5
)

type fixture struct {
	seed            []byte
	hash, oprf      *aggregator.Partition
	hashItems       []protocol.Decrypted
	items           []protocol.Decrypted // OPRF mode
	truth           map[string]string    // OPRF tag hex → artifact
	released        map[string]bool
	aux             []Count
	auxUsers        int
	targetUsers     int
	targetReports   int
	allQueries      []string
	targetArtifacts int
}

var (
	fxOnce sync.Once
	fx     *fixture
	fxErr  error
)

func loadFixture(t *testing.T) *fixture {
	t.Helper()
	fxOnce.Do(func() { fx, fxErr = buildFixture() })
	if fxErr != nil {
		t.Fatal(fxErr)
	}
	return fx
}

func buildFixture() (*fixture, error) {
	app, err := apps.Lookup(fxApp)
	if err != nil {
		return nil, err
	}
	f := &fixture{seed: make([]byte, 32), truth: map[string]string{}, released: map[string]bool{}}
	rand.Read(f.seed)
	key, _ := onion.GenerateKeyPair(1)
	f.hash = aggregator.NewPartition(0, 1, []*onion.KeyPair{key})
	f.oprf = aggregator.NewPartition(0, 1, []*onion.KeyPair{key})
	oprfOmega := KeyOmega(f.seed)
	type pair struct{ hash, oprf *star.Sealing }
	sealings := map[string]pair{}
	auxUsers, auxHits := map[string]int{}, map[string]int{}
	all := map[string]bool{}
	i := 0
	_, err = aol.ReadUsers(bundledLog, func(u aol.User) error {
		arts := app.Mine(u.Records)
		i++
		for _, a := range arts {
			all[a.Primary] = true
		}
		if i%2 == 0 {
			f.auxUsers++
			seen := map[string]bool{}
			for _, a := range arts {
				auxHits[a.Primary]++
				if !seen[a.Primary] {
					seen[a.Primary] = true
					auxUsers[a.Primary]++
				}
			}
			return nil
		}
		f.targetUsers++
		sec, _ := star.NewUserSecret()
		for _, a := range arts {
			s, ok := sealings[a.Primary]
			if !ok {
				hs, err := star.DeriveSealing(star.LocalOmega(fxApp, fxEpoch, a.Primary), fxApp, fxEpoch, star.FTu, fxK)
				if err != nil {
					return err
				}
				w, err := oprfOmega(fxApp, fxEpoch, a.Primary)
				if err != nil {
					return err
				}
				os, err := star.DeriveSealing(w, fxApp, fxEpoch, star.FTu, fxK)
				if err != nil {
					return err
				}
				s = pair{&hs, &os}
				sealings[a.Primary] = s
				f.truth[hex.EncodeToString(os.Tag[:])] = a.Primary
			}
			for _, m := range []struct {
				s   *star.Sealing
				p   *aggregator.Partition
				out *[]protocol.Decrypted
			}{{s.hash, f.hash, &f.hashItems}, {s.oprf, f.oprf, &f.items}} {
				r, err := m.s.Seal(&sec, a.Primary, a.Secondary)
				if err != nil {
					return err
				}
				*m.out = append(*m.out, m.p.ApplyReport(r)...)
			}
			f.targetReports++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f.targetArtifacts = len(sealings)
	for _, d := range f.items {
		f.released[d.Item] = true
	}
	for a, u := range auxUsers {
		if !f.released[a] { // analysts know what was released
			f.aux = append(f.aux, Count{Artifact: a, Users: u, Hits: auxHits[a]})
		}
	}
	for q := range all {
		f.allQueries = append(f.allQueries, q)
	}
	sort.Strings(f.allQueries)
	return f, nil
}

func words(t *testing.T) []string {
	t.Helper()
	w, err := readLines("testdata/google-10000-english.txt")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestAttackProbe: the offline probe of a compromised aggregator's pending
// shares (CrowdLogging §5.4) with the 10k common words plus every query of
// the bundled log. The attacker knows the whole derivation — RFC 9497
// OPRF input, tag, polynomial (star.DeriveSealing) — and lacks only the
// epoch key, so it evaluates the OPRF under keys it can choose. It must
// find nothing. Two controls show the test can fail: the same probe finds
// every pending artifact in hash mode (star.LocalOmega, no key), and finds
// every pending artifact among the words once it holds the real epoch key
// (aggregator + randomness service collusion).
func TestAttackProbe(t *testing.T) {
	f := loadFixture(t)
	cands := append(words(t), f.allQueries...)

	// control 1: hash mode falls to the probe
	hashPending := f.hash.Pending()
	res, err := Probe(hashPending, cands, LocalOmegaFunc)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending == 0 || res.Found != res.Pending {
		t.Fatalf("hash mode: found %d of %d pending artifacts, want all (the probe must work where no key protects ω)", res.Found, res.Pending)
	}
	for tag, a := range res.Artifacts { // every identification is right
		if TagHex(star.LocalOmega(fxApp, fxEpoch, a), fxApp, fxEpoch, star.FTu, fxK) != tag {
			t.Fatal("hash-mode probe identified a tag wrongly")
		}
	}
	hashFound := res.Found

	// the attack: correct derivation, guessed epoch keys
	oprfPending := f.oprf.Pending()
	found, guesses := 0, 1
	for g := 0; g < guesses; g++ {
		guess := make([]byte, 32)
		rand.Read(guess)
		res, err := Probe(oprfPending, cands, KeyOmega(guess))
		if err != nil {
			t.Fatal(err)
		}
		found += res.Found
	}

	// control 2: the same code path with the real epoch key
	w := words(t)
	res, err = Probe(oprfPending, w, KeyOmega(f.seed))
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	inWords := map[string]bool{}
	for _, x := range w {
		inWords[x] = true
	}
	for _, g := range oprfPending {
		if inWords[f.truth[g.Tag]] {
			want++
		}
	}
	fmt.Printf("ATTACK probe-oprf: found %d of %d pending artifacts with %d candidates under %d guessed epoch keys (controls: hash mode %d of %d, real epoch key %d of %d among the words)\n",
		found, len(oprfPending), len(cands), guesses, hashFound, len(hashPending), res.Found, want)
	if res.Found != want || want == 0 {
		t.Fatalf("control: the probe with the real epoch key found %d, want %d: the probe code does not derive tags as clients do", res.Found, want)
	}
	if found != 0 {
		t.Fatalf("the probe without the epoch key identified %d pending artifacts", found)
	}
}

// TestFrequencyPending: Kumar-style rank matching of the pending groups'
// (shares, reports) against the auxiliary half's (users, hits). Measures
// how many undecrypted tags a compromised aggregator can name without any
// key. The assertion bounds the leak at the measured order of magnitude.
func TestFrequencyPending(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bundled log: the full suite (make test) runs it; -short (and so the race run) does not")
	}
	f := loadFixture(t)
	pend := f.oprf.Pending()
	res := RankMatch(pend, f.aux, f.truth, 100)
	t.Logf("rank matching: %d pending tags, %d guesses, %d correct (%.2f%%); top 100: %d correct",
		res.Tags, res.Guesses, res.Correct, 100*float64(res.Correct)/float64(res.Guesses), res.CorrectTop)
	if res.Guesses == 0 {
		t.Fatal("no guesses made")
	}
	if res.Correct*100 > res.Guesses {
		t.Fatalf("rank matching named %d of %d pending tags (> 1%%)", res.Correct, res.Guesses)
	}
}

// TestFrequencySummary: what the counts-only summary tells an analyst with
// an auxiliary log, exact vs coarsened (Partition.CoarseSummary): rows
// naming exactly one undecrypted artifact, and how many of those the
// analyst pins to the right artifact.
func TestFrequencySummary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bundled log: the full suite (make test) runs it; -short (and so the race run) does not")
	}
	f := loadFixture(t)
	pend := f.oprf.Pending()
	scale := float64(f.targetUsers) / float64(f.auxUsers)
	rows, ident, matched := SummaryLeak(pend, false, f.aux, scale, f.truth)
	crows, cident, cmatched := SummaryLeak(pend, true, f.aux, scale, f.truth)
	t.Logf("exact summary: %d rows, %d name one artifact, %d matched; coarse: %d rows, %d name one artifact, %d matched",
		rows, ident, matched, crows, cident, cmatched)
	if cident >= ident || cmatched > matched || crows >= rows {
		t.Fatalf("coarsening did not reduce the leak: exact %d/%d/%d, coarse %d/%d/%d", rows, ident, matched, crows, cident, cmatched)
	}
	// the aggregator's coarse summary is exactly what SummaryLeak modelled
	key, _ := onion.GenerateKeyPair(1)
	p := aggregator.NewPartition(0, 1, []*onion.KeyPair{key})
	p.CoarseSummary = true
	for _, n := range []int{1, 3, 6, 7, 9} {
		s, _ := star.DeriveSealing(star.LocalOmega(fxApp, "coarse", string(rune('a'+n))), fxApp, "coarse", star.FTa, 1000)
		u, _ := star.NewUserSecret()
		for i := 0; i < n; i++ {
			r, _ := s.Seal(&u, "x", "x")
			p.ApplyReport(r)
		}
	}
	out := p.Apply(aggregator.Message{Control: true, Value: []byte(`{"app":"query","epoch":"coarse","partitions":1}`)})
	got := map[uint64]uint64{}
	for _, r := range out[0].Summary {
		got[r.Reports] += r.Tags
	}
	if want := map[uint64]uint64{1: 1, 2: 1, 4: 2, 8: 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("coarse summary rows %v, want %v", got, want)
	}
}

// TestSybil: one real report of a unique query plus k−1 fabricated
// clients (the attacker knows or guesses the query and obtains ω like any
// client) opens it: the attacker reads the real user's report. This is the
// tokens-off baseline (CrowdLogging §5.4, STAR §7): with tokens on, FT_u
// counts ARC credentials of enrolled identities, so the same attack needs
// k−1 identities (TestAttackSybilIdentities, TestAttackManySecrets).
func TestSybil(t *testing.T) {
	key, _ := onion.GenerateKeyPair(1)
	p := aggregator.NewPartition(0, 1, []*onion.KeyPair{key})
	seed := make([]byte, 32)
	rand.Read(seed)
	q := "unique query " + hex.EncodeToString(seed[:4])
	w, _ := KeyOmega(seed)(fxApp, fxEpoch, q)
	s, _ := star.DeriveSealing(w, fxApp, fxEpoch, star.FTu, fxK)
	real, _ := star.NewUserSecret()
	r, _ := s.Seal(&real, q, "the real user's original form")
	var out []protocol.Decrypted
	out = append(out, p.ApplyReport(r)...)
	for i := 0; i < fxK-1; i++ {
		sybil, _ := star.NewUserSecret()
		r, _ := s.Seal(&sybil, q, "sybil")
		out = append(out, p.ApplyReport(r)...)
	}
	realOpened := false
	for _, d := range out {
		if d.Variant == "the real user's original form" {
			realOpened = true
		}
	}
	t.Logf("Sybil: 1 real + %d fabricated users released %d reports, the real one opened: %v", fxK-1, len(out), realOpened)
	if len(out) != fxK || !realOpened {
		t.Fatalf("Sybil attack: %d reports opened, real opened %v; want all %d opened (the attack succeeds)", len(out), realOpened, fxK)
	}
}

// TestAttackLinkingByUnitID: nothing an analyst or the aggregator reads
// links two artifacts of one user.
// Released rows (release.Item) carry no unit, report or tag; a decrypted
// item carries exactly the documented fields; unit ids are per (user, tag):
// across every decrypted item of the fixture no unit id appears under two
// tags, and one user's unit ids differ in ~64 of 128 bits like unrelated
// random strings.
func TestAttackLinkingByUnitID(t *testing.T) {
	f := loadFixture(t)
	rt := reflect.TypeOf(release.Item{})
	for i := 0; i < rt.NumField(); i++ {
		switch strings.ToLower(rt.Field(i).Name) {
		case "unit", "report", "tag", "user", "anonid":
			t.Fatalf("released rows carry field %s", rt.Field(i).Name)
		}
	}
	if len(f.items) == 0 {
		t.Fatal("nothing released")
	}
	b, _ := json.Marshal(f.items[0])
	var fields map[string]any
	json.Unmarshal(b, &fields)
	var names []string
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	if want := "app epoch item k kind policy report tag unit variant"; strings.Join(names, " ") != want {
		t.Fatalf("decrypted item fields %v, want %s", names, want)
	}
	unitTags := map[string]map[string]bool{}
	for _, d := range f.items {
		if unitTags[d.Unit] == nil {
			unitTags[d.Unit] = map[string]bool{}
		}
		unitTags[d.Unit][d.Tag] = true
	}
	shared := 0
	for _, tags := range unitTags {
		if len(tags) > 1 {
			shared++
		}
	}
	// one user's units for many artifacts: bitwise unrelated
	var u star.UserSecret
	rand.Read(u[:])
	var total, pairs int
	var prev [16]byte
	for i := 0; i < 200; i++ {
		s, _ := star.DeriveSealing(star.LocalOmega(fxApp, fxEpoch, string(rune(i+'0'))), fxApp, fxEpoch, star.FTu, fxK)
		unit := s.UnitID(&u)
		if i > 0 {
			for j := range unit {
				total += bits.OnesCount8(unit[j] ^ prev[j])
			}
			pairs++
		}
		prev = unit
	}
	mean := float64(total) / float64(pairs)
	// control: the same linker over units derived from the user alone
	// (no tag) links every user's artifacts, so the count above can fail
	control := map[[16]byte]map[string]bool{}
	for i := 0; i < 20; i++ {
		var u star.UserSecret
		rand.Read(u[:])
		m := hmac.New(sha256.New, u[:])
		m.Write([]byte("unit"))
		var unit [16]byte
		copy(unit[:], m.Sum(nil))
		control[unit] = map[string]bool{}
		for j := 0; j < 5; j++ {
			control[unit][fmt.Sprint(i, j)] = true
		}
	}
	linked := 0
	for _, tags := range control {
		if len(tags) > 1 {
			linked++
		}
	}
	fmt.Printf("ATTACK linking-unit-id: %d of %d unit ids shared across tags in %d decrypted items; one user's unit ids differ in %.1f of 128 bits (control, per-user units: %d of 20 users linked)\n",
		shared, len(unitTags), len(f.items), mean, linked)
	if linked != 20 {
		t.Fatalf("control: the linker linked %d of 20 users with per-user units", linked)
	}
	if shared != 0 || mean < 56 || mean > 72 {
		t.Fatalf("unit ids link artifacts: %d shared across tags, mean distance %.1f bits (want 0 and ≈64)", shared, mean)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
