package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"sort"
	"strconv"
	"strings"
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
		names[i] = label(e)
	}
	p.NominalX(names...)
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
		names[i] = label(t.Dataset + " / " + t.Epoch)
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
	p.NominalX(names...)
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
	p.NominalX(ticks...)
	if len(ticks) > 6 {
		p.X.Tick.Label.Rotation = math.Pi / 4
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
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
