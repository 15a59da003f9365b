package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// maxShareSeries bounds the series of the share plot (one per app, policy
// and k); the ones with the most impressions are kept.
const maxShareSeries = 8

// labelRunes bounds a plot label; the tables show the whole string.
const labelRunes = 40

// label is clip(s, labelRunes), for tick and legend labels.
func label(s string) string { return clip(s, labelRunes) }

// title is clip(s, 2*labelRunes), for plot titles.
func title(s string) string { return clip(s, 2*labelRunes) }

// clip makes s fit for a plot: printable runes only (invalid UTF-8 and
// control characters become U+FFFD), at most max runes then "…". gonum's
// SVG canvas escapes the text it writes (html.EscapeString).
func clip(s string, max int) string {
	var b strings.Builder
	n := 0
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			r = '\uFFFD'
		}
		if n == max {
			b.WriteRune('…')
			break
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// svg renders p as an SVG element (the XML prolog removed) of w × h.
func svg(p *plot.Plot, w, h vg.Length) (string, error) {
	return svgDraw(p.Title.Text, w, h, p.Draw)
}

// svgDraw renders what drawFn draws on a w × h canvas as an SVG element
// (the XML prolog removed); name names the plot in errors.
func svgDraw(name string, w, h vg.Length, drawFn func(draw.Canvas)) (string, error) {
	c := vgsvg.New(w, h)
	drawFn(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("report: draw plot %q: %w", name, err)
	}
	s := buf.String()
	i := strings.Index(s, "<svg")
	if i < 0 {
		return "", fmt.Errorf("report: draw plot %q: no <svg> element in gonum's output", name)
	}
	return s[i:], nil
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	return p
}

// topPlot is a horizontal bar chart of r.Top's impressions, most at the top.
func topPlot(r Release) (string, error) {
	n := len(r.Top)
	vals := make(plotter.Values, n)
	names := make([]string, n)
	for i, it := range r.Top {
		j := n - 1 - i // NominalY puts index 0 at the bottom
		vals[j] = float64(it.Impressions)
		names[j] = label(it.Item)
	}
	p := newPlot(title(fmt.Sprintf("top %d: %s", n, keyTitle(r))), "impressions", "")
	bars, err := plotter.NewBarChart(vals, vg.Points(12))
	if err != nil {
		return "", fmt.Errorf("report: top plot of %s: %w", r.Key, err)
	}
	bars.Horizontal = true
	bars.LineStyle.Width = 0
	bars.Color = plotutil.Color(0)
	p.Add(bars)
	p.NominalY(names...)
	p.X.Min = 0
	return svg(p, 7*vg.Inch, vg.Length(1.2+0.25*float64(n))*vg.Inch)
}

// undecryptedPlot is a bar chart of r.Undecrypted: artifacts still
// encrypted against the reports each had (lines with equal reports and
// different users share a bar).
func undecryptedPlot(r Release) (string, error) {
	tags := map[uint64]uint64{}
	var reports []uint64
	for _, u := range r.Undecrypted {
		if _, ok := tags[u.Reports]; !ok {
			reports = append(reports, u.Reports)
		}
		tags[u.Reports] += u.Tags
	}
	sort.Slice(reports, func(i, j int) bool { return reports[i] < reports[j] })
	vals := make(plotter.Values, len(reports))
	names := make([]string, len(reports))
	for i, n := range reports {
		vals[i] = float64(tags[n])
		names[i] = strconv.FormatUint(n, 10)
	}
	p := newPlot(title("still encrypted: "+keyTitle(r)), "reports per artifact", "artifacts")
	bars, err := plotter.NewBarChart(vals, vg.Points(14))
	if err != nil {
		return "", fmt.Errorf("report: undecrypted plot of %s: %w", r.Key, err)
	}
	bars.LineStyle.Width = 0
	bars.Color = plotutil.Color(1)
	p.Add(bars)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -1, float64(len(names)) // room beside few bars
	p.Y.Min = 0
	return svg(p, 7*vg.Inch, 3*vg.Inch)
}

// series is one (app, policy, k) of the share plot.
type series struct {
	name        string
	impressions uint64
	share       map[string]float64 // by epoch
}

// shareSeries groups the releases with a known Share by (app, policy, k),
// keeps the maxShareSeries with the most impressions and returns them with
// the epochs, sorted, and the number of series dropped.
func shareSeries(rels []Release) (ss []*series, epochs []string, dropped int) {
	byName := map[string]*series{}
	seenEpoch := map[string]bool{}
	for _, r := range rels {
		sh, ok := r.Share()
		if !ok {
			continue
		}
		name := fmt.Sprintf("%s %s k=%d", r.App, r.Policy, r.K)
		s := byName[name]
		if s == nil {
			s = &series{name: name, share: map[string]float64{}}
			byName[name] = s
			ss = append(ss, s)
		}
		s.impressions += r.Impressions
		s.share[r.Epoch] = sh
		seenEpoch[r.Epoch] = true
	}
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].impressions > ss[j].impressions })
	if len(ss) > maxShareSeries {
		dropped = len(ss) - maxShareSeries
		ss = ss[:maxShareSeries]
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].name < ss[j].name })
	for e := range seenEpoch {
		epochs = append(epochs, e)
	}
	sort.Strings(epochs)
	return ss, epochs, dropped
}

// sharePlot is a grouped bar chart: per epoch, the share of impressions
// released of each (app, policy, k).
func sharePlot(ss []*series, epochs []string) (string, error) {
	p := newPlot("share of impressions released per epoch", "epoch", "released / (released + still encrypted)")
	w := vg.Points(min(24, 360/float64(len(ss)*len(epochs))))
	for i, s := range ss {
		vals := make(plotter.Values, len(epochs))
		for j, e := range epochs {
			vals[j] = s.share[e]
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return "", fmt.Errorf("report: share plot: %w", err)
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(i)
		bars.Offset = vg.Length(float64(i)-float64(len(ss)-1)/2) * w
		p.Add(bars)
		p.Legend.Add(label(s.name), bars)
	}
	names := make([]string, len(epochs))
	for i, e := range epochs {
		names[i] = epochTick(e)
	}
	nominalX(p, names)
	p.X.Min, p.X.Max = -1, float64(len(epochs))
	p.Y.Min, p.Y.Max = 0, 1.15 // room for the legend above the bars
	p.Legend.Top = true
	return svg(p, 7*vg.Inch, 4*vg.Inch)
}

// ledgerPlot is a bar chart of ε spent per (dataset, epoch), with the ε
// budget as a red line when one is given.
func ledgerPlot(totals []LedgerTotal, budgetEps float64) (string, error) {
	p := newPlot("privacy budget: ε spent per (dataset, epoch)", "dataset / epoch", "ε")
	vals := make(plotter.Values, len(totals))
	names := make([]string, len(totals))
	top := budgetEps
	for i, t := range totals {
		vals[i] = t.Epsilon
		names[i] = label(t.Dataset + " / " + epochTick(t.Epoch))
		top = max(top, t.Epsilon)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(min(24, 360/float64(len(totals)))))
	if err != nil {
		return "", fmt.Errorf("report: ledger plot: %w", err)
	}
	bars.LineStyle.Width = 0
	bars.Color = plotutil.Color(2)
	p.Add(bars)
	p.Legend.Add("ε spent", bars)
	if budgetEps > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: budgetEps}, {X: float64(len(totals)) - 0.5, Y: budgetEps}})
		if err != nil {
			return "", fmt.Errorf("report: ledger plot: %w", err)
		}
		l.Color = color.RGBA{R: 200, A: 255}
		l.Width = vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("budget ε = %.4g", budgetEps), l)
	}
	nominalX(p, names)
	p.X.Min, p.X.Max = -1, float64(len(totals))
	p.Y.Min, p.Y.Max = 0, top*1.25
	if top == 0 {
		p.Y.Max = 1
	}
	p.Legend.Top = true
	return svg(p, 7*vg.Inch, 3.5*vg.Inch)
}

// trendLegendRunes bounds an artifact in the trend plot's legend.
const trendLegendRunes = 28

// trendPlot draws t: one line per artifact, its impressions per epoch
// (epochs in time order on x), a black × where the artifact was not
// released (drawn at 0). The legend, numbered as the table below the
// plot, stands right of the plot.
func trendPlot(t Trend) (string, error) {
	xlabel := "epoch (by name: the names carry no time)"
	switch t.Period {
	case "":
	case "day", "month", "year":
		xlabel = "epoch (one " + t.Period + " each)"
	default:
		xlabel = "epoch start, UTC (" + t.Period + " each)"
	}
	name := title(fmt.Sprintf("top %d across epochs: %s · %s · k=%d", len(t.Artifacts), t.App, t.Policy, t.K))
	p := newPlot(name, xlabel, "impressions released")
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.TextStyle.Font.Size = vg.Points(9)
	leg.ThumbnailWidth = vg.Points(16)
	leg.Padding = vg.Points(2)
	var absent plotter.XYs
	top := 0.0
	for i, a := range t.Artifacts {
		xys := make(plotter.XYs, len(t.Epochs))
		for j := range t.Epochs {
			xys[j] = plotter.XY{X: float64(j), Y: float64(a.Impressions[j])}
			if !a.Released[j] {
				absent = append(absent, xys[j])
			}
			top = max(top, xys[j].Y)
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return "", fmt.Errorf("report: trend plot of %s %s k=%d: %w", t.App, t.Policy, t.K, err)
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors)) // solid until the colours repeat
		l.Width = vg.Points(1.5)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		pts.Radius = vg.Points(3)
		p.Add(l, pts)
		leg.Add(fmt.Sprintf("%d. %s", i+1, clip(a.Item, trendLegendRunes)), l, pts)
	}
	if len(absent) > 0 {
		s, err := plotter.NewScatter(absent)
		if err != nil {
			return "", fmt.Errorf("report: trend plot of %s %s k=%d: %w", t.App, t.Policy, t.K, err)
		}
		s.GlyphStyle = draw.GlyphStyle{Shape: draw.CrossGlyph{}, Radius: vg.Points(5), Color: color.Black}
		p.Add(s)
		leg.Add("not released (< k): 0", s)
	}
	ticks := make([]string, len(t.Epochs))
	for i, e := range t.Epochs {
		ticks[i] = epochTick(e)
	}
	nominalX(p, ticks)
	p.X.Min, p.X.Max = -0.5, float64(len(t.Epochs))-0.5
	p.Y.Min, p.Y.Max = 0, top*1.08
	if top == 0 {
		p.Y.Max = 1
	}
	const w, h, legendW = 8 * vg.Inch, 4.5 * vg.Inch, 2.4 * vg.Inch
	return svgDraw(name, w, h, func(c draw.Canvas) {
		p.Draw(draw.Crop(c, 0, -legendW, 0, 0))
		leg.Draw(draw.Crop(c, w-legendW+vg.Points(8), 0, 0, -vg.Points(30)))
	})
}

func keyTitle(r Release) string {
	return fmt.Sprintf("%s · %s · %s · k=%d", r.App, r.Epoch, r.Policy, r.K)
}

// maxTickLabels bounds the labelled ticks of an x axis of epochs or days:
// every k-th tick is labelled (k the smallest that keeps at most this
// many), the others keep their mark without a label.
const maxTickLabels = 12

// rotateAbove is the number of labelled ticks above which x labels are
// drawn at 45°, so that names of 10 characters or more never overlap.
const rotateAbove = 5

// nominalX is plot.NominalX(names...) with at most maxTickLabels labels
// (every k-th name, the first one included) drawn at 45° when more than
// rotateAbove are labelled or a label is long, so that no two labels
// overlap at the plot's width.
func nominalX(p *plot.Plot, names []string) {
	p.NominalX(names...)
	step := (len(names) + maxTickLabels - 1) / maxTickLabels
	step = max(step, 1)
	ticks := make([]plot.Tick, len(names))
	labelled, longest := 0, 0
	for i, n := range names {
		ticks[i] = plot.Tick{Value: float64(i)}
		if i%step == 0 {
			ticks[i].Label = n
			labelled++
			longest = max(longest, utf8.RuneCountInString(n))
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if labelled > rotateAbove || (labelled > 1 && longest > 12) {
		rotateX(p)
	}
}

// rotateX draws p's x tick labels at 45°, right-aligned under their tick.
func rotateX(p *plot.Plot) {
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
}

// dayTicks labels an axis of n days from first (x = days since first) with
// dates, at most maxTickLabels of them, rotated when more than
// rotateAbove.
func dayTicks(p *plot.Plot, first time.Time, n int) {
	step := max((n+maxTickLabels-1)/maxTickLabels, 1)
	var ticks []plot.Tick
	labelled := 0
	for i := 0; i < n; i++ {
		t := plot.Tick{Value: float64(i)}
		if i%step == 0 {
			t.Label = first.AddDate(0, 0, i).Format("2006-01-02")
			labelled++
		}
		ticks = append(ticks, t)
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if labelled > rotateAbove {
		rotateX(p)
	}
	p.X.Min, p.X.Max = -0.5, float64(n)-0.5
}

// pddX returns the x of each day of c (days since its first day) and the
// number of calendar days it spans.
func pddX(c Campaign) ([]float64, int) {
	xs := make([]float64, len(c.Days))
	if len(c.Days) == 0 {
		return xs, 0
	}
	first := c.Days[0].Day
	for i, d := range c.Days {
		xs[i] = math.Round(d.Day.Sub(first).Hours() / 24)
	}
	return xs, int(xs[len(xs)-1]) + 1
}

// runs splits the released days of c into runs of consecutive released
// days (index ranges [a, b)), so lines and bands break at withheld days.
func runs(c Campaign, xs []float64) [][2]int {
	var out [][2]int
	start := -1
	for i := 0; i <= len(c.Days); i++ {
		ok := i < len(c.Days) && c.Days[i].Released && (start < 0 || xs[i] == xs[i-1]+1)
		if ok && start < 0 {
			start = i
			continue
		}
		if !ok && start >= 0 {
			out = append(out, [2]int{start, i})
			start = -1
			if i < len(c.Days) && c.Days[i].Released {
				start = i
			}
		}
	}
	return out
}

// pddPlot draws the daily released counts of c's keywords: one line per
// keyword over its released days (broken at withheld days), a shaded band
// of ± the day's noise half-width (BandLevel) around it on noisy days, a
// black × at 0 on withheld days. The legend, numbered as the table below
// the plot, stands right of the plot.
func pddPlot(c Campaign) (string, error) {
	name := title(fmt.Sprintf("daily counts: campaign %s", c.Name))
	p := newPlot(name, "day (UTC)", "released count")
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.TextStyle.Font.Size = vg.Points(9)
	leg.ThumbnailWidth = vg.Points(16)
	leg.Padding = vg.Points(2)
	xs, span := pddX(c)
	rs := runs(c, xs)
	lo, hi := 0.0, 0.0
	banded := false
	// bands for the named keywords, else the top three: the band's
	// half-width is the same for every keyword of a day, and a band per
	// line would cover the plot
	bandOf, anyNamed := map[int]bool{}, false
	for i, k := range c.Keywords {
		if k.Named {
			bandOf[i], anyNamed = true, true
		}
	}
	if !anyNamed {
		for i := range min(3, len(c.Keywords)) {
			bandOf[i] = true
		}
	}
	for i, k := range c.Keywords {
		col := plotutil.Color(i)
		var first *plotter.Line
		var firstPts *plotter.Scatter
		for _, r := range rs {
			var upper, lower plotter.XYs
			runBanded := false
			line := make(plotter.XYs, 0, r[1]-r[0])
			for j := r[0]; j < r[1]; j++ {
				y := float64(k.Counts[j])
				h := c.Noise[j].HalfWidth
				if !bandOf[i] {
					h = 0
				}
				line = append(line, plotter.XY{X: xs[j], Y: y})
				upper = append(upper, plotter.XY{X: xs[j], Y: y + h})
				lower = append(lower, plotter.XY{X: xs[j], Y: y - h})
				lo, hi = min(lo, y-h), max(hi, y+h)
				runBanded = runBanded || h > 0
			}
			banded = banded || runBanded
			if runBanded {
				poly := append(plotter.XYs{}, upper...)
				if len(upper) == 1 { // a lone day: a thin box
					poly = plotter.XYs{{X: xs[r[0]] - 0.15, Y: upper[0].Y}, {X: xs[r[0]] + 0.15, Y: upper[0].Y},
						{X: xs[r[0]] + 0.15, Y: lower[0].Y}, {X: xs[r[0]] - 0.15, Y: lower[0].Y}}
				} else {
					for j := len(lower) - 1; j >= 0; j-- {
						poly = append(poly, lower[j])
					}
				}
				band, err := plotter.NewPolygon(poly)
				if err != nil {
					return "", fmt.Errorf("report: PDD plot of %s: %w", c.Name, err)
				}
				r8, g8, b8, _ := col.RGBA()
				band.Color = color.NRGBA{R: uint8(r8 >> 8), G: uint8(g8 >> 8), B: uint8(b8 >> 8), A: 0x30}
				band.LineStyle.Width = 0
				p.Add(band)
			}
			l, pts, err := plotter.NewLinePoints(line)
			if err != nil {
				return "", fmt.Errorf("report: PDD plot of %s: %w", c.Name, err)
			}
			l.Color = col
			l.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
			l.Width = vg.Points(1.5)
			if k.Named {
				l.Width = vg.Points(2.5)
			}
			pts.Color = col
			pts.Shape = plotutil.Shape(i)
			pts.Radius = vg.Points(2.5)
			p.Add(l, pts)
			if first == nil {
				first, firstPts = l, pts
			}
		}
		if first != nil {
			lbl := fmt.Sprintf("%d. %s", i+1, clip(k.Keyword, trendLegendRunes))
			if k.Named {
				lbl += " (named)"
			}
			leg.Add(lbl, first, firstPts)
		}
	}
	var withheld plotter.XYs
	for i, d := range c.Days {
		if !d.Released {
			withheld = append(withheld, plotter.XY{X: xs[i], Y: 0})
		}
	}
	if len(withheld) > 0 {
		s, err := plotter.NewScatter(withheld)
		if err != nil {
			return "", fmt.Errorf("report: PDD plot of %s: %w", c.Name, err)
		}
		s.GlyphStyle = draw.GlyphStyle{Shape: draw.CrossGlyph{}, Radius: vg.Points(5), Color: color.Black}
		p.Add(s)
		leg.Add("withheld day (table below)", s)
	}
	if banded {
		sw, err := plotter.NewPolygon(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}, {X: 1, Y: 1}})
		if err == nil {
			sw.Color = color.NRGBA{R: 0x80, G: 0x80, B: 0x80, A: 0x50}
			sw.LineStyle.Width = 0
			which := "keywords 1–3"
			if anyNamed {
				which = "named keywords"
			}
			leg.Add(fmt.Sprintf("%.0f%% noise band (%s)", 100*BandLevel, which), sw)
		}
	}
	if len(c.Days) > 0 {
		dayTicks(p, c.Days[0].Day, span)
	}
	p.Y.Min, p.Y.Max = lo, hi*1.08
	if lo < 0 {
		p.Y.Min = lo * 1.08
	}
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min + 1
	}
	const w, h, legendW = 8 * vg.Inch, 4.5 * vg.Inch, 2.4 * vg.Inch
	return svgDraw(name, w, h, func(cv draw.Canvas) {
		p.Draw(draw.Crop(cv, 0, -legendW, 0, 0))
		leg.Draw(draw.Crop(cv, w-legendW+vg.Points(8), 0, 0, -vg.Points(30)))
	})
}

// confidencePlot draws c's confidence per released day (clients decrypted
// / clients active, PDD §4.5) with a black × at 0 on withheld days.
func confidencePlot(c Campaign) (string, error) {
	name := title(fmt.Sprintf("confidence per day: campaign %s", c.Name))
	p := newPlot(name, "day (UTC)", "decrypted / active")
	xs, span := pddX(c)
	for _, r := range runs(c, xs) {
		var line plotter.XYs
		for j := r[0]; j < r[1]; j++ {
			line = append(line, plotter.XY{X: xs[j], Y: c.Days[j].Round.Confidence})
		}
		l, pts, err := plotter.NewLinePoints(line)
		if err != nil {
			return "", fmt.Errorf("report: confidence plot of %s: %w", c.Name, err)
		}
		l.Color, pts.Color = plotutil.Color(0), plotutil.Color(0)
		l.Width, pts.Radius = vg.Points(1.5), vg.Points(2.5)
		p.Add(l, pts)
	}
	var withheld plotter.XYs
	for i, d := range c.Days {
		if !d.Released {
			withheld = append(withheld, plotter.XY{X: xs[i], Y: 0})
		}
	}
	if len(withheld) > 0 {
		s, err := plotter.NewScatter(withheld)
		if err != nil {
			return "", fmt.Errorf("report: confidence plot of %s: %w", c.Name, err)
		}
		s.GlyphStyle = draw.GlyphStyle{Shape: draw.CrossGlyph{}, Radius: vg.Points(5), Color: color.Black}
		p.Add(s)
		p.Legend.Add("withheld day", s)
		p.Legend.Top = true
	}
	if len(c.Days) > 0 {
		dayTicks(p, c.Days[0].Day, span)
	}
	p.Y.Min, p.Y.Max = 0, 1.15
	return svg(p, 8*vg.Inch, 2.8*vg.Inch)
}
