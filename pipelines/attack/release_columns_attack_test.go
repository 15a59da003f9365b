package attack

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest"
	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/ingest/apps"
	"github.com/crowdlog/crowdlog/protocol"
	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/policy"
	"github.com/crowdlog/crowdlog/release/stage"
)

// colsUser is one made-up user of the neighbouring logs: two queries of
// one session, each with a click, spelled as given.
type colsUser struct {
	first, second string // original spellings of the two queries
	url           string // the clicked URL as logged (full)
}

// colsRecords is u's log: first then second one minute apart, both
// clicking u.url.
func colsRecords(id int, u colsUser) []aol.Record {
	t0 := time.Date(2006, 3, 1, 10, 0, 0, 0, time.UTC)
	return []aol.Record{
		{Line: 1, AnonID: fmt.Sprint(id), Query: u.first, QueryTime: t0, ItemRank: 1, ClickURL: u.url},
		{Line: 2, AnonID: fmt.Sprint(id), Query: u.second, QueryTime: t0.Add(time.Minute), ItemRank: 2, ClickURL: u.url},
	}
}

// colsLog is the log D of the audit: half the users type "Weather" /
// "Forecast", half "weather" / "forecast" (a tie, so the exact most
// frequent spelling is the byte-smallest, "Weather"), and each clicks a
// page of one site under a URL of its own (the canonical URL at the
// default level is the host); with added, D' = D plus one user typing
// "weather" / "forecast" and clicking a page only it visits.
func colsLog(half int, added bool) []colsUser {
	var us []colsUser
	for i := range 2 * half {
		u := colsUser{first: "Weather", second: "Forecast", url: fmt.Sprintf("http://www.Example.com/page%d.html?s=%d", i%7, i)}
		if i%2 == 1 {
			u.first, u.second = "weather", "forecast"
		}
		us = append(us, u)
	}
	if added {
		us = append(us, colsUser{first: "weather", second: "forecast", url: "http://www.example.com/the-added-users-own-page?id=4417749"})
	}
	return us
}

// colsState runs the real client mining (app.Mine and the policy's
// client-side limit) over users and feeds what the aggregator would emit
// for pol — one decrypted item per report of an artifact at or above the
// Shamir cut, unit = (user, artifact) — through the release stage's
// State, whose epoch it then closes. It returns the state and the number
// of reports.
func colsState(t *testing.T, app apps.App, pol *policy.Policy, users []colsUser) *stage.State {
	t.Helper()
	limit, distinct := pol.Limit()
	type rep struct{ user, item, variant string }
	var reps []rep
	for i, u := range users {
		arts := app.Mine(colsRecords(i, u))
		if w := pol.Window(); w > 0 {
			arts = ingest.LimitFrequent(arts, limit, w)
		} else {
			arts = ingest.LimitArtifacts(arts, limit, distinct)
		}
		for _, a := range arts {
			reps = append(reps, rep{fmt.Sprint(i), a.Primary, a.Secondary})
		}
	}
	// the aggregator decrypts an artifact at k_s reports (FT_a sealing) or
	// k_s distinct users (FT_u sealing)
	count := map[string]map[string]bool{}
	reports := map[string]int{}
	for _, r := range reps {
		if count[r.item] == nil {
			count[r.item] = map[string]bool{}
		}
		count[r.item][r.user] = true
		reports[r.item]++
	}
	seal := pol.Sealing()
	st := stage.NewState()
	for i, r := range reps {
		n := len(count[r.item])
		if seal.String() == "ft-a" {
			n = reports[r.item]
		}
		if n < pol.ShamirK {
			continue
		}
		b, err := json.Marshal(protocol.Decrypted{Kind: protocol.KindItem, App: app.Name(), Epoch: "e", Policy: seal.String(), K: pol.ShamirK,
			Tag: fmt.Sprintf("%x", r.item), Report: fmt.Sprintf("r%06d", i), Unit: fmt.Sprintf("u%s/%x", r.user, r.item),
			Item: r.item, Variant: r.variant})
		if err != nil {
			t.Fatal(err)
		}
		st.Apply(b)
	}
	b, _ := json.Marshal(protocol.Decrypted{Kind: protocol.KindClosed, App: app.Name(), Epoch: "e", Partitions: 1})
	if _, _, done := st.Apply(b); !done {
		t.Fatal("epoch not complete")
	}
	return st
}

// colsRun is one release of st under pol (State.Publish, the release
// stage's path to ClickHouse): the released rows and undecrypted lines.
// With exact, each row's Variant is replaced by the exact most frequent
// original form (State.Release: what a DP release published before it
// left the column empty) — the control.
func colsRun(t *testing.T, st *stage.State, app string, pol *policy.Policy, exact bool) ([]release.Item, []release.Undecrypted) {
	items, undec, _, err := st.Publish(app, "e", pol, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if exact {
		ex, _ := st.Release(app, "e")
		v := map[string]string{}
		for _, it := range ex {
			v[it.Item] = it.Variant
		}
		for i := range items {
			items[i].Variant = v[items[i].Item]
		}
	}
	return items, undec
}

// colsEvents are the events of one release, as names, each at most once:
// every column of every released row — "X released", "X
// app/epoch/policy/k=…", "X variant=v", "X impressions>q" for q in
// qs["X impressions"] and "X users>q" for q in qs["X users"] —, the whole
// row set's discrete columns, and the undecrypted lines' count. An event
// listed twice in one release would be counted twice, its frequency then
// being twice a binomial one, with twice the standard error the audit's
// slack assumes (and above 1 when common).
func colsEvents(items []release.Item, undec []release.Undecrypted, qs map[string][]uint64) []string {
	var ev, set []string
	for _, it := range items {
		ev = append(ev, it.Item+" released", fmt.Sprintf("%s key=%s", it.Item, it.Key()), fmt.Sprintf("%s variant=%q", it.Item, it.Variant))
		for _, q := range qs[it.Item+" impressions"] {
			if it.Impressions > q {
				ev = append(ev, fmt.Sprintf("%s impressions>%d", it.Item, q))
			}
		}
		for _, q := range qs[it.Item+" users"] {
			if it.Users > q {
				ev = append(ev, fmt.Sprintf("%s users>%d", it.Item, q))
			}
		}
		set = append(set, fmt.Sprintf("%q/%q", it.Item, it.Variant))
	}
	sort.Strings(set)
	ev = append(ev, "rows="+strings.Join(set, ","), fmt.Sprintf("undecrypted lines=%d", len(undec)))
	sort.Strings(ev)
	return slices.Compact(ev)
}

// colsZ is the audit's slack in binomial standard errors. Each audit
// compares a few hundred event frequencies both ways, and the count
// events of dp-su sit exactly at the bound (a Laplace tail above both
// counts: P_D' = e^ε·P_D), so the slack must cover the largest sampling
// error of some 10⁴ comparisons of the whole test (Bonferroni: a
// two-sided normal tail of 2·10⁻⁹ each). Exact binomial sums at n = 3000
// for dp-su (ε = ln 10, b = 1/ε, counts 10 in D and 11 in D'): the tight
// event "count > 11" fails with probability 5·10⁻⁹ (1.3·10⁻⁵ with 4
// standard errors), while a count of sensitivity 2 (12 in D') fails it
// with probability 1 − 3·10⁻¹² and a count noised with scale b/2 (ε
// spent twice) fails "count > 10" with probability 0.9999.
const colsZ = 6

// colsRatio is ratio with colsZ standard errors of slack: the larger of
// (p − z·se(p)) / (e^ε·(q + z·se(q)) + δ) and the same with p and q
// swapped, se(p) = √(max(p, δ)·(1 − p)/n); above 1 breaks p ≤ e^ε·q + δ.
func colsRatio(p, q, eps, delta float64, n int) float64 {
	slack := func(p float64) float64 { return colsZ * math.Sqrt(math.Max(p, delta)*(1-p)/float64(n)) }
	e := math.Exp(eps)
	return math.Max((p-slack(p))/(e*(q+slack(q))+delta), (q-slack(q))/(e*(p+slack(p))+delta))
}

// colsCheck is the outcome of one policy × app × path.
type colsCheck struct {
	worst      float64 // the largest ratio (≤ 1 holds)
	event      string  // its event
	pD, pN     float64 // its frequencies on D and D'
	flip, base float64 // frequency of "some released variant ≠ \"\"" on D', D
}

// colsAudit releases D and D' n times each under pol and compares the
// frequency of every event (colsEvents) both ways against e^ε·p + δ with
// the achieved (ε, δ), up to colsZ binomial standard errors (colsRatio).
// Count thresholds q are the distinct 50th, 90th and 99th percentiles of
// each item's released impressions, and separately of its released users,
// in a pilot of 400 releases of D drawn apart from the audited ones.
func colsAudit(t *testing.T, d, dn *stage.State, app string, pol *policy.Policy, exact bool, n int) colsCheck {
	qs := map[string][]uint64{}
	pilot := map[string][]uint64{}
	for range 400 {
		items, _ := colsRun(t, d, app, pol, exact)
		for _, it := range items {
			pilot[it.Item+" impressions"] = append(pilot[it.Item+" impressions"], it.Impressions)
			pilot[it.Item+" users"] = append(pilot[it.Item+" users"], it.Users)
		}
	}
	for it, v := range pilot {
		slices.Sort(v)
		for _, p := range []float64{0.5, 0.9, 0.99} {
			qs[it] = append(qs[it], v[int(p*float64(len(v)-1))])
		}
		qs[it] = slices.Compact(qs[it])
	}
	freq := func(st *stage.State) (map[string]float64, float64) {
		f := map[string]float64{}
		variant := 0.0
		for range n {
			items, undec := colsRun(t, st, app, pol, exact)
			for _, e := range colsEvents(items, undec, qs) {
				f[e]++
			}
			for _, it := range items {
				if it.Variant != "" {
					variant++
					break
				}
			}
		}
		for e := range f {
			f[e] /= float64(n)
		}
		return f, variant / float64(n)
	}
	fD, vD := freq(d)
	fN, vN := freq(dn)
	c := colsCheck{flip: vN, base: vD}
	for _, m := range []map[string]float64{fD, fN} {
		for e := range m {
			r := colsRatio(fD[e], fN[e], pol.AchievedEpsilon, pol.AchievedDelta, n)
			if r > c.worst {
				c.worst, c.event, c.pD, c.pN = r, e, fD[e], fN[e]
			}
		}
	}
	return c
}

// colsPolicies are the DP policies of the audit at the flag defaults
// (ε = ln 10; d = 1, m = 20 for dp-gsu, dp-su's window 20), U = 1000
// public users.
func colsPolicies(t *testing.T) []*policy.Policy {
	var out []*policy.Policy
	for _, k := range policy.Kinds() {
		if !k.IsDP() {
			continue
		}
		d := 1
		switch k {
		case policy.DPGSU:
			d = policy.DefaultGaussianSetUnionM
		case policy.DPSU:
			d = 20
		}
		p, err := policy.New(policy.Params{Kind: k, Epsilon: math.Ln10, D: d, Users: 1000})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestAttackDPReleaseColumns is the whole-release neighbouring-logs audit
// of every DP policy × mining application. D: 2h made-up users, half of
// them typing "Weather"/"Forecast" and half "weather"/"forecast", each
// clicking its own page of one site; D' = D plus one user typing the
// lower-case spellings and clicking a page nobody else visits (its
// reformulation original is "weather → forecast"). h puts the artifacts
// 4 noise scales above the release threshold, so they are released on
// both sides nearly always. Each log goes through the real client mining
// and limit and the release stage's State (Apply, Publish) n times; every
// column of every released row (item, key, variant, impressions, users),
// the row set and the undecrypted lines are events whose frequencies must
// satisfy p ≤ e^ε·q + δ both ways beyond colsZ = 6 standard errors. Control: the
// same audit with each row's variant the exact most frequent original
// form (the release before DP rows dropped it) must fail on the apps that
// carry original queries (query, reformulation, click, ltr), and at
// dp-gsu's defaults the 40-user tie (20 "Weather", 20 "weather",
// one more "weather" in D') must flip the exact variant in ≥ 90% of
// releases while the released one never is "weather". The count events
// are tight where the mechanism is (dp-su's Laplace tail: p ≈ e^ε·q), so
// the audit would see a count noised at less than ε.
func TestAttackDPReleaseColumns(t *testing.T) {
	const n = 3000
	var lines, ctl []string
	worst, ctlMin := 0.0, math.Inf(1)
	flipMax := 0.0
	for _, pol := range colsPolicies(t) {
		scale := math.Max(pol.B, pol.BA)
		half := int(math.Ceil((pol.Threshold+4*scale)/2)) + 1
		for _, name := range apps.Apps() {
			app, err := apps.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			d := colsState(t, app, pol, colsLog(half, false))
			dn := colsState(t, app, pol, colsLog(half, true))
			c := colsAudit(t, d, dn, name, pol, false, n)
			worst = math.Max(worst, c.worst)
			if c.worst > 1 {
				t.Errorf("%s × %s: the release of D and of D' (one user added) differ beyond (ε=%.3g, δ=%.2g): event %q has frequency %.4f vs %.4f (ratio %.2f to e^ε·p+δ)",
					pol.Kind, name, pol.AchievedEpsilon, pol.AchievedDelta, c.event, c.pD, c.pN, c.worst)
			}
			flipMax = math.Max(flipMax, math.Max(c.flip, c.base))
			if name == "query" || name == "reformulation" || name == "click" || name == "ltr" {
				k := colsAudit(t, d, dn, name, pol, true, n/3)
				ctlMin = math.Min(ctlMin, k.worst)
				if k.worst <= 1 {
					t.Errorf("control %s × %s: the exact variant passed the audit (worst event %q %.4f vs %.4f): the audit cannot see an exact column", pol.Kind, name, k.event, k.pD, k.pN)
				}
				if name == "query" {
					ctl = append(ctl, fmt.Sprintf("%s %s: P_D=%.3f P_D'=%.3f (ratio %.0f)", pol.Kind, k.event, k.pD, k.pN, k.worst))
				}
			}
		}
		lines = append(lines, fmt.Sprintf("%s (ε=%.3g δ=%.2g, h=%d)", pol.Kind, pol.AchievedEpsilon, pol.AchievedDelta, half))
	}
	// the 40-user case at dp-gsu's defaults: 20 "Weather" + 20 "weather",
	// D' adds a 21st "weather"; the exact variant flips when the item is
	// released, with probability ≈ P(40 + N(0, σ²) > T)
	gsu := colsPolicies(t)[4]
	q, _ := apps.Lookup("query")
	d40, dn40 := colsState(t, q, gsu, colsLog(20, false)), colsState(t, q, gsu, colsLog(20, true))
	flip := func(st *stage.State, exact bool) float64 {
		hits := 0
		for range n {
			items, _ := colsRun(t, st, "query", gsu, exact)
			for _, it := range items {
				if it.Item == "weather" && it.Variant == "weather" {
					hits++
				}
			}
		}
		return float64(hits) / float64(n)
	}
	fixedD, fixedN, exactD, exactN := flip(d40, false), flip(dn40, false), flip(d40, true), flip(dn40, true)
	if fixedD != 0 || fixedN != 0 {
		t.Errorf("dp-gsu, 40 users: the released variant of \"weather\" is \"weather\" in %.4f (D) and %.4f (D') of releases, want 0", fixedD, fixedN)
	}
	if exactN-exactD < 0.9 {
		t.Errorf("control dp-gsu, 40 users: the exact variant flipped in only %.4f vs %.4f of releases", exactN, exactD)
	}
	fmt.Printf("ATTACK dp-release-columns: %d DP policies × %d apps, D vs D' (+1 user: lower-case spelling, own URL), %d releases each, every column of every row: worst ratio to e^ε·p+δ %.2f (≤ 1 holds), released variant ≠ \"\" in %.3f of releases [%s]; dp-gsu defaults, 20 \"Weather\" + 20 \"weather\" (+1): P(variant = \"weather\") %.3f vs %.3f; control (exact variant): dp-gsu 40-user flip P_D'=%.3f vs P_D=%.3f (bound e^ε·P_D+δ=%.4f), minimum ratio %.0f, %s\n",
		len(lines), len(apps.Apps()), n, worst, flipMax, strings.Join(lines, ", "), fixedN, fixedD, exactN, exactD,
		math.Exp(gsu.AchievedEpsilon)*exactD+gsu.AchievedDelta, ctlMin, strings.Join(ctl, "; "))
}
