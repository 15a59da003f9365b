package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/infra/atomicfile"
	"github.com/crowdlog/crowdlog/release"
)

// figure is one inline SVG plot; Name is its data-plot attribute.
type figure struct {
	Name    string
	SVG     template.HTML // gonum's SVG; its text is escaped by vgsvg
	Caption string
}

type releaseView struct {
	Release
	Title            string
	Share            string
	Still, StillTags uint64
	Top, Undec       *figure
}

// trendView is one Trend as the page shows it: its plot and a table with
// one row per artifact and one column per epoch.
type trendView struct {
	Trend
	Title  string
	Plot   *figure
	Heads  []epochHead
	Rows   []trendRow
	Absent string // what a missing artifact means (absentReason)
	Gaps   int    // cells of artifacts not released
}

type epochHead struct{ Name, Tick string }

type trendRow struct {
	Rank  int
	Item  string
	Total uint64
	Cells []trendCell
}

// trendCell is one (artifact, epoch): Released false shows "—".
type trendCell struct {
	Impressions uint64
	Released    bool
}

func newTrendView(t Trend, n int) (trendView, error) {
	v := trendView{Trend: t, Title: fmt.Sprintf("%s · %s · k=%d", t.App, t.Policy, t.K), Absent: absentReason(t.Policy, t.K)}
	if t.Period != "" {
		v.Title += " · " + t.Period + " epochs"
	}
	for _, e := range t.Epochs {
		v.Heads = append(v.Heads, epochHead{Name: e, Tick: epochTick(e)})
	}
	for i, a := range t.Artifacts {
		row := trendRow{Rank: i + 1, Item: a.Item, Total: a.Total}
		for j := range t.Epochs {
			row.Cells = append(row.Cells, trendCell{Impressions: a.Impressions[j], Released: a.Released[j]})
			if !a.Released[j] {
				v.Gaps++
			}
		}
		v.Rows = append(v.Rows, row)
	}
	if len(t.Artifacts) > 0 {
		s, err := trendPlot(t)
		if err != nil {
			return v, err
		}
		v.Plot = &figure{Name: fmt.Sprintf("trend-%d", n), SVG: template.HTML(s)}
	}
	return v, nil
}

// pddView is one PDD campaign as the page shows it.
type pddView struct {
	Campaign
	Mode           string
	Plot, ConfPlot *figure
	Rows           []pddDayRow
	Heads          []string // the days, for the keyword table
	KRows          []pddKeywordRow
	Released       int
	Withheld       int
	Reasons        string // withheld days per reason
	Noisy          bool
}

type pddDayRow struct {
	Day, Status, Reason, Detail string
	Released                    bool
	Active, Decrypted           string
	Groups, Recovered, Lost     string
	Confidence, Epsilon, Band   string
	BandHow                     string // the draws and scale behind Band
}

type pddKeywordRow struct {
	Rank    int
	Keyword string
	Named   bool
	Cells   []string // "—" on withheld days
	Total   int64
}

func newPDDView(c Campaign, n int) (pddView, error) {
	v := pddView{Campaign: c, Mode: c.Mode}
	switch c.Mode {
	case "groups":
		v.Mode = "groups mode (blinded groups, one Laplace draw per count at the release stage)"
	case "prio3":
		v.Mode = "Prio3 mode (two aggregators, one Laplace draw each per count)"
	default:
		v.Mode = "mode not recorded (a database written before pdd_campaigns existed; exact days spend nothing from the ledger)"
	}
	if s := configText(c.Configs); s != "" {
		v.Mode += "; " + s
	}
	reasons := map[string]int{}
	var order []string
	for i, d := range c.Days {
		day := d.Day.Format("2006-01-02")
		v.Heads = append(v.Heads, day)
		row := pddDayRow{Day: day, Released: d.Released, Active: "—", Decrypted: "—", Groups: "—", Recovered: "—", Lost: "—",
			Confidence: "—", Epsilon: "—", Band: "—"}
		if r := d.Round; r != nil {
			if r.Active > 0 || r.Epsilon == 0 {
				row.Active, row.Decrypted = strconv.FormatUint(uint64(r.Active), 10), strconv.FormatUint(uint64(r.Decrypted), 10)
			} else {
				row.Active, row.Decrypted = "not published", "not published"
			}
			row.Groups, row.Recovered, row.Lost = strconv.FormatUint(uint64(r.Groups), 10), strconv.FormatUint(uint64(r.Recovered), 10), strconv.FormatUint(uint64(r.Lost), 10)
			row.Confidence = fmt.Sprintf("%.3f", r.Confidence)
			row.Epsilon = "exact"
			if r.Epsilon > 0 {
				row.Epsilon = num(r.Epsilon)
			}
		}
		if nz := c.Noise[i]; nz.Scale > 0 {
			row.Band = fmt.Sprintf("± %.1f", nz.HalfWidth)
			row.BandHow = fmt.Sprintf("%d × Lap(%.4g), scale from the %s", nz.Draws, nz.Scale, nz.Source)
			v.Noisy = true
		}
		if d.Released {
			row.Status = "released"
			v.Released++
		} else {
			row.Status = "withheld"
			row.Reason, row.Detail = withheldText(d.Reason), d.Detail
			v.Withheld++
			for _, r := range strings.Split(d.Reason, ",") {
				if reasons[r] == 0 {
					order = append(order, r)
				}
				reasons[r]++
			}
		}
		v.Rows = append(v.Rows, row)
	}
	var parts []string
	for _, r := range order {
		parts = append(parts, fmt.Sprintf("%s %d", r, reasons[r]))
	}
	v.Reasons = strings.Join(parts, ", ")
	for i, k := range c.Keywords {
		row := pddKeywordRow{Rank: i + 1, Keyword: k.Keyword, Named: k.Named, Total: k.Total}
		for j, d := range c.Days {
			if d.Released {
				row.Cells = append(row.Cells, strconv.FormatInt(k.Counts[j], 10))
			} else {
				row.Cells = append(row.Cells, "—")
			}
		}
		v.KRows = append(v.KRows, row)
	}
	if len(c.Days) > 0 {
		s, err := pddPlot(c)
		if err != nil {
			return v, err
		}
		v.Plot = &figure{Name: fmt.Sprintf("pdd-%d", n), SVG: template.HTML(s)}
		if v.Released > 0 {
			s, err := confidencePlot(c)
			if err != nil {
				return v, err
			}
			v.ConfPlot = &figure{Name: fmt.Sprintf("pdd-confidence-%d", n), SVG: template.HTML(s)}
		}
	}
	return v, nil
}

type totalView struct {
	LedgerTotal
	EpsBudget, EpsLeft, DeltaBudget, DeltaLeft string
	Over                                       bool
}

type page struct {
	Database, Generated string
	Releases            []releaseView
	Detailed            []releaseView
	Omitted             int
	Share               *figure
	ShareDropped        int
	NoShare             int
	Trends              []trendView
	TrendsDropped       int
	TrendTop            int
	Ledger              []release.Spend
	Totals              []totalView
	LedgerPlot          *figure
	Top                 int
	PDD                 []pddView
	BandLevel           string
}

// Render writes d as one self-contained HTML page to w: inline CSS and
// SVG, no script, nothing loaded from elsewhere.
func Render(w io.Writer, d *Data) error {
	pg := page{Database: d.Database, Generated: time.Now().UTC().Format(time.RFC3339), Ledger: d.Ledger, Top: d.Top,
		TrendsDropped: d.TrendsDropped, TrendTop: d.TrendTop, BandLevel: fmt.Sprintf("%.0f%%", 100*BandLevel)}
	for n, c := range d.PDD {
		v, err := newPDDView(c, n)
		if err != nil {
			return err
		}
		pg.PDD = append(pg.PDD, v)
	}
	views := make([]releaseView, len(d.Releases))
	for i, r := range d.Releases {
		v := releaseView{Release: r, Title: keyTitle(r), Still: r.UndecryptedReports(), StillTags: r.UndecryptedTags(), Share: "no summary"}
		if sh, ok := r.Share(); ok {
			v.Share = fmt.Sprintf("%.1f%%", 100*sh)
		} else {
			pg.NoShare++
		}
		views[i] = v
	}
	for n, i := range d.Detailed {
		v := views[i]
		if len(v.Release.Top) > 0 {
			s, err := topPlot(v.Release)
			if err != nil {
				return err
			}
			v.Top = &figure{Name: fmt.Sprintf("top-%d", n), SVG: template.HTML(s)}
		}
		if len(v.Undecrypted) > 0 {
			s, err := undecryptedPlot(v.Release)
			if err != nil {
				return err
			}
			v.Undec = &figure{Name: fmt.Sprintf("undecrypted-%d", n), SVG: template.HTML(s)}
		}
		pg.Detailed = append(pg.Detailed, v)
	}
	pg.Releases = views
	pg.Omitted = len(d.Releases) - len(d.Detailed)
	if ss, epochs, dropped := shareSeries(d.Releases); len(ss) > 0 {
		s, err := sharePlot(ss, epochs)
		if err != nil {
			return err
		}
		pg.Share = &figure{Name: "share", SVG: template.HTML(s)}
		pg.ShareDropped = dropped
	}
	for n, t := range d.Trends {
		v, err := newTrendView(t, n)
		if err != nil {
			return err
		}
		pg.Trends = append(pg.Trends, v)
	}
	for _, t := range d.Totals {
		v := totalView{LedgerTotal: t, EpsBudget: "no limit", EpsLeft: "—", DeltaBudget: "no limit", DeltaLeft: "—"}
		if b := d.Budget.Epsilon; b > 0 {
			v.EpsBudget, v.EpsLeft = num(b), num(b-t.Epsilon)
			v.Over = v.Over || t.Epsilon > b*(1+1e-9)
		}
		if b := d.Budget.Delta; b > 0 {
			v.DeltaBudget, v.DeltaLeft = num(b), num(b-t.Delta)
			v.Over = v.Over || t.Delta > b*(1+1e-9)
		}
		pg.Totals = append(pg.Totals, v)
	}
	if len(d.Totals) > 0 {
		s, err := ledgerPlot(d.Totals, d.Budget.Epsilon)
		if err != nil {
			return err
		}
		pg.LedgerPlot = &figure{Name: "ledger", SVG: template.HTML(s)}
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, pg); err != nil {
		return fmt.Errorf("report: render: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteFile renders d into path, atomically (infra/atomicfile: a temporary file in
// the same folder, synced, renamed), mode 0644.
func WriteFile(path string, d *Data) error {
	var buf bytes.Buffer
	if err := Render(&buf, d); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	return nil
}

func num(f float64) string { return fmt.Sprintf("%.4g", f) }

var pageTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"num":   num,
	"time":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"inc":   func(i int) int { return i + 1 },
	"first": func(s []string) string { return s[0] },
	"last":  func(s []string) string { return s[len(s)-1] },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>crowdlog release report: {{.Database}}</title>
<style>
body { font-family: sans-serif; margin: 2em auto; max-width: 60em; padding: 0 1em; color: #222; }
h1, h2, h3 { font-weight: 600; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0 1.5em; font-size: 90%; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
td.item { max-width: 28em; overflow-wrap: anywhere; }
td.absent { color: #999; }
div.wide { overflow-x: auto; }
tr.over td { background: #fdd; }
tr.withheld td { background: #f4f4f4; color: #666; }
table.pdd-days td:first-child, table.pdd-counts th { white-space: nowrap; }
figure.plot { margin: 1em 0; }
figure.plot svg { max-width: 100%; height: auto; }
.note { color: #555; font-size: 90%; }
</style>
</head>
<body>
<h1>crowdlog: what was released</h1>
<p>Database <code>{{.Database}}</code>, generated {{.Generated}}. Completed releases (app, epoch, policy, k): {{len .Releases}}. As in the analyst views, only keys with a row in <code>releases</code> are shown. Everything on this page was released, so public by construction.</p>

<section id="releases">
<h2>Releases</h2>
<table>
<thead><tr><th>app</th><th>epoch</th><th>policy</th><th class="n">k</th><th class="n">artifacts released</th><th class="n">impressions released</th><th class="n">artifacts still encrypted</th><th class="n">reports still encrypted</th><th class="n">share released</th><th>released at</th></tr></thead>
<tbody>
{{- range .Releases}}
<tr><td>{{.App}}</td><td>{{.Epoch}}</td><td>{{.Policy}}</td><td class="n">{{.K}}</td><td class="n">{{.Items}}</td><td class="n">{{.Impressions}}</td><td class="n">{{.StillTags}}</td><td class="n">{{.Still}}</td><td class="n">{{.Share}}</td><td>{{time .ReleasedAt}}</td></tr>
{{- end}}
</tbody>
</table>
</section>

<section id="share">
<h2>Share of impressions released per epoch</h2>
<p class="note">Released impressions / (released impressions + reports still encrypted when the epoch closed, from the undecrypted summary). Under the coarse summary a line's reports are its bucket's lower bound, so the share is an upper bound. Releases without summary lines (DP policies withhold them; <code>--summary none</code>) have no share{{if .NoShare}}: {{.NoShare}} here{{end}}.</p>
{{- with .Share}}
<figure class="plot" data-plot="{{.Name}}">{{.SVG}}</figure>
{{- else}}
<p>No release published an undecrypted summary, so no share can be shown.</p>
{{- end}}
{{- if .ShareDropped}}
<p class="note">{{.ShareDropped}} (app, policy, k) series with fewer impressions are left out of the plot; the table above has them.</p>
{{- end}}
</section>

<section id="trends">
<h2>Top artifacts across epochs</h2>
{{- if .Trends}}
<p class="note">For each release series (app, policy, k) with two epochs or more, the {{.TrendTop}} artifacts with the most impressions released summed over its epochs, and their impressions per epoch, epochs in time order. An epoch's release names only the artifacts that reached the policy's threshold there: a <em>not released</em> cell (—, and × at 0 in the plot) means the artifact stayed below it that epoch (for ft-u: fewer than k distinct users sent it), not that nobody searched for it; the totals count it as 0. Epochs whose names read as different periods (a weekly replay and the whole log as <code>all</code>) are separate series. For DP policies the counts are the noisy released values.</p>
{{- range .Trends}}
<article class="trend">
<h3>{{.Title}}</h3>
<p>{{len .Epochs}} epochs, {{.Epochs | first}} to {{.Epochs | last}}.{{if .Gaps}} Not released: {{.Gaps}} of the cells below, where {{.Absent}}.{{end}}</p>
{{- with .Plot}}
<figure class="plot" data-plot="{{.Name}}">{{.SVG}}</figure>
{{- end}}
{{- if .Rows}}
<div class="wide">
<table class="trend">
<thead><tr><th class="n">rank</th><th>artifact</th>{{range .Heads}}<th class="n" title="{{.Name}}">{{.Tick}}</th>{{end}}<th class="n">total</th></tr></thead>
<tbody>
{{- $absent := .Absent}}
{{- range .Rows}}
<tr><td class="n">{{.Rank}}</td><td class="item">{{.Item}}</td>{{range .Cells}}{{if .Released}}<td class="n">{{.Impressions}}</td>{{else}}<td class="n absent" title="not released: {{$absent}}">—</td>{{end}}{{end}}<td class="n">{{.Total}}</td></tr>
{{- end}}
</tbody>
</table>
</div>
{{- else}}
<p>This series released no artifact.</p>
{{- end}}
</article>
{{- end}}
{{- if .TrendsDropped}}
<p class="note">{{.TrendsDropped}} more series with fewer impressions are left out; the release table above lists their releases.</p>
{{- end}}
{{- else}}
<p>No trend to show: every release series (app, policy, k) here has one epoch only. <code>crowdlog run</code> releases the whole log as one epoch (<code>all</code>) unless given <code>--epoch-length</code>; <code>crowdlog run --epoch-length 168h</code> replays it week by week, one release per week.</p>
{{- end}}
</section>

<section id="top">
<h2>Top artifacts and what stayed encrypted</h2>
<p class="note">The {{.Top}} artifacts with the most impressions of each release{{if .Omitted}}, for the {{len .Detailed}} most recent releases ({{.Omitted}} older ones are only in the table above){{end}}. For threshold policies the counts are exact; for DP policies they are the noisy released values.</p>
{{- range .Detailed}}
<article>
<h3>{{.Title}}</h3>
{{- with .Top}}
<figure class="plot" data-plot="{{.Name}}">{{.SVG}}</figure>
{{- end}}
{{- if .Release.Top}}
<table class="top">
<thead><tr><th class="n">rank</th><th>artifact</th><th>variant</th><th class="n">impressions</th><th class="n">users</th></tr></thead>
<tbody>
{{- range $i, $it := .Release.Top}}
<tr><td class="n">{{inc $i}}</td><td class="item">{{$it.Item}}</td><td class="item">{{$it.Variant}}</td><td class="n">{{$it.Impressions}}</td><td class="n">{{$it.Users}}</td></tr>
{{- end}}
</tbody>
</table>
{{- else}}
<p>This release released no artifact.</p>
{{- end}}
<h4>Still encrypted at epoch close</h4>
{{- with .Undec}}
<figure class="plot" data-plot="{{.Name}}">{{.SVG}}</figure>
{{- end}}
{{- if .Undecrypted}}
<p>{{.StillTags}} artifacts with {{.Still}} reports stayed encrypted (counts only: no artifact is named).</p>
<table class="undecrypted">
<thead><tr><th class="n">reports per artifact</th><th class="n">users</th><th class="n">artifacts</th></tr></thead>
<tbody>
{{- range .Undecrypted}}
<tr><td class="n">{{.Reports}}</td><td class="n">{{.Users}}</td><td class="n">{{.Tags}}</td></tr>
{{- end}}
</tbody>
</table>
{{- else}}
<p>No summary lines were published for this release.</p>
{{- end}}
</article>
{{- end}}
</section>

<section id="pdd">
<h2>Private Data Donor campaigns: daily keyword counts</h2>
{{- if .PDD}}
<p class="note">Per campaign of <code>crowdlog pdd</code> (groups or Prio3 mode): the released count per day (UTC) of its keywords with the largest released count over its days, and of the keywords named with <code>--keyword</code> (thicker lines, "named"). A keyword without a row on a released day was released as 0 (the tables keep only non-zero counts; under noise, a noisy 0). On days released with noise (ε &gt; 0) the shaded band (drawn for the named keywords, else for the top three; the days table gives it for every count) is the {{.BandLevel}} band of the noise of one count: count ± h, where h is the {{.BandLevel}} quantile of the noise's absolute value (the 97.5% quantile of the noise, which is symmetric): for one Laplace draw of scale b (groups mode, b = max_count / ε) h = b·ln 20 ≈ 3.0·b; for the sum of the two aggregators' draws (Prio3 mode, b = S/ε as the privacy ledger records it) h solves (1 + h/2b)·e^(−h/b) = 0.05, h ≈ 4.1·b. The noise is integer (two-sided geometric), the band its continuous approximation. Under noise the keywords are ranked by their noisy sums, and among thousands of keywords the largest noisy sums are mostly noise: follow the keywords you mean with <code>--keyword</code>. Confidence is clients decrypted / clients active that day (PDD §4.5). Withheld days (× in the plots, — in the tables) released nothing.</p>
{{- range .PDD}}
<article class="pdd">
<h3>campaign {{.Name}}</h3>
<p>{{.Mode}}. {{len .Days}} days: {{.Released}} released{{if .Withheld}}, {{.Withheld}} withheld ({{.Reasons}}){{end}}.</p>
{{- with .Plot}}
<figure class="plot" data-plot="{{.Name}}">{{.SVG}}</figure>
{{- end}}
{{- with .ConfPlot}}
<figure class="plot" data-plot="{{.Name}}">{{.SVG}}</figure>
{{- end}}
<h4>Days released and withheld</h4>
<table class="pdd-days">
<thead><tr><th>day</th><th>status</th><th>why withheld</th><th class="n">clients active</th><th class="n">decrypted</th><th class="n">groups</th><th class="n">recovered</th><th class="n">lost</th><th class="n">confidence</th><th class="n">ε</th><th class="n">noise band ({{$.BandLevel}})</th></tr></thead>
<tbody>
{{- range .Rows}}
<tr class="{{.Status}}"><td>{{.Day}}</td><td>{{.Status}}</td><td title="{{.Detail}}">{{.Reason}}</td><td class="n">{{.Active}}</td><td class="n">{{.Decrypted}}</td><td class="n">{{.Groups}}</td><td class="n">{{.Recovered}}</td><td class="n">{{.Lost}}</td><td class="n">{{.Confidence}}</td><td class="n">{{.Epsilon}}</td><td class="n">{{.Band}}{{with .BandHow}}<br><span class="note">{{.}}</span>{{end}}</td></tr>
{{- end}}
</tbody>
</table>
{{- if .KRows}}
<h4>Daily counts</h4>
<div class="wide">
<table class="pdd-counts">
<thead><tr><th class="n">rank</th><th>keyword</th>{{range .Heads}}<th class="n">{{.}}</th>{{end}}<th class="n">total</th></tr></thead>
<tbody>
{{- range .KRows}}
<tr><td class="n">{{.Rank}}</td><td class="item">{{.Keyword}}{{if .Named}} (named){{end}}</td>{{range .Cells}}<td class="n">{{.}}</td>{{end}}<td class="n">{{.Total}}</td></tr>
{{- end}}
</tbody>
</table>
</div>
{{- else}}
<p>No keyword count was released in this campaign.</p>
{{- end}}
</article>
{{- end}}
{{- else}}
<p>No PDD campaign here: the tables <code>pdd_rounds</code> and <code>pdd_withheld</code> are empty or missing. <code>crowdlog pdd --clickhouse HOST:PORT</code> (or <code>--state DIR</code>, then <code>crowdlog clickhouse --dir DIR/clickhouse</code>) releases into this database.</p>
{{- end}}
</section>

<section id="ledger">
<h2>Privacy ledger</h2>
{{- if .Totals}}
<p class="note">Spend of the differentially private releases per (dataset, epoch), against the budget given to this report (<code>--budget-epsilon</code>, <code>--budget-delta</code>; the database does not record it). A spend counts from the moment it is written, before its release completes.</p>
{{- with .LedgerPlot}}
<figure class="plot" data-plot="{{.Name}}">{{.SVG}}</figure>
{{- end}}
<table class="totals">
<thead><tr><th>dataset</th><th>epoch</th><th class="n">releases</th><th class="n">ε spent</th><th class="n">ε budget</th><th class="n">ε left</th><th class="n">δ spent</th><th class="n">δ budget</th><th class="n">δ left</th></tr></thead>
<tbody>
{{- range .Totals}}
<tr{{if .Over}} class="over"{{end}}><td>{{.Dataset}}</td><td>{{.Epoch}}</td><td class="n">{{.Rows}}</td><td class="n">{{num .Epsilon}}</td><td class="n">{{.EpsBudget}}</td><td class="n">{{.EpsLeft}}</td><td class="n">{{num .Delta}}</td><td class="n">{{.DeltaBudget}}</td><td class="n">{{.DeltaLeft}}</td></tr>
{{- end}}
</tbody>
</table>
<table class="spends">
<thead><tr><th>dataset</th><th>epoch</th><th>app</th><th>policy</th><th class="n">k</th><th class="n">ε</th><th class="n">δ</th><th>parameters</th><th>spent at</th></tr></thead>
<tbody>
{{- range .Ledger}}
<tr><td>{{.Dataset}}</td><td>{{.Epoch}}</td><td>{{.App}}</td><td>{{.Policy}}</td><td class="n">{{.K}}</td><td class="n">{{num .Epsilon}}</td><td class="n">{{num .Delta}}</td><td>{{.Params}}</td><td>{{time .SpentAt}}</td></tr>
{{- end}}
</tbody>
</table>
{{- else}}
<p>No differentially private release has spent budget: the ledger is empty.</p>
{{- end}}
</section>
</body>
</html>
`))

// configText states a campaign's configurations (pdd_campaigns rows) in
// words: per row its ε ("exact" at 0), the sensitivity under its mode's
// name (max_count, or S = one person's daily L1 bound), k (group size, or
// minimum batch size) and the measurement; rows joined by "; ".
func configText(cs []release.PDDCampaign) string {
	var parts []string
	for _, c := range cs {
		eps := "exact counts (ε = 0)"
		if c.Epsilon > 0 {
			eps = "ε = " + num(c.Epsilon) + " per day"
		}
		var p string
		switch c.Mode {
		case release.PDDModePrio3:
			p = fmt.Sprintf("%s, S = %d (one person's daily L1 bound), minimum batch %d", eps, c.Sensitivity, c.K)
		case release.PDDModeGroups:
			p = fmt.Sprintf("%s, max_count = %d", eps, c.Sensitivity)
			if c.K > 0 {
				p += fmt.Sprintf(", group size %d", c.K)
			}
		default:
			p = fmt.Sprintf("mode %s, %s, sensitivity %d, k %d", c.Mode, eps, c.Sensitivity, c.K)
		}
		if c.Params != "" {
			p += " (" + c.Params + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}
