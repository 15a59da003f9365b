package simulate

import (
	"fmt"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PDDPlotGroupSize is the group size of the mode-comparison plot when the
// grid has it (the paper's running example, §4.4), else the grid's first.
const PDDPlotGroupSize = 100

// Plot writes the PDD figures into dir (ext "svg" or "png", gonum.org/v1/plot)
// and returns the paths written:
//   - pdd-mre-MODE.EXT: MRE against the delay, one line per group size, one
//     file per mode (PDD Fig. 5a is mode pdd, Fig. 5b pdd+heuristic);
//   - pdd-confidence-MODE.EXT: confidence against the delay (Fig. 6 is
//     pdd+heuristic);
//   - pdd-mre-modes.EXT: MRE against the delay at one group size
//     (PDDPlotGroupSize), one line per mode, and one per Prio3
//     measurement at grace δ + 1.
//
// MODE is the mode name with "+" written "-".
func (r *PDDResult) Plot(dir, ext string) ([]string, error) {
	if ext != "svg" && ext != "png" {
		return nil, fmt.Errorf("simulate pdd: plot format %q: use svg or png", ext)
	}
	var sizes []int
	seen := map[int]bool{}
	for _, p := range r.Points {
		if !seen[p.GroupSize] {
			seen[p.GroupSize] = true
			sizes = append(sizes, p.GroupSize)
		}
	}
	if len(sizes) == 0 {
		return nil, fmt.Errorf("simulate pdd: nothing to plot")
	}
	mre := func(p PDDPoint) float64 { return p.MRE }
	conf := func(p PDDPoint) float64 { return p.Confidence }
	series := func(keep func(PDDPoint) bool, y func(PDDPoint) float64) plotter.XYs {
		var xy plotter.XYs
		for _, p := range r.Points {
			if keep(p) {
				xy = append(xy, plotter.XY{X: float64(p.Delay), Y: y(p)})
			}
		}
		return xy
	}
	var out []string
	save := func(p *plot.Plot, name string) error {
		path := filepath.Join(dir, name+"."+ext)
		if err := p.Save(6*vg.Inch, 4*vg.Inch, path); err != nil {
			return fmt.Errorf("simulate pdd: save plot %s: %w", path, err)
		}
		out = append(out, path)
		return nil
	}
	newPlot := func(title, ylabel string) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "delay δ (days)"
		p.Y.Label.Text = ylabel
		// headroom above 1 keeps the legend off the lines
		p.Y.Min, p.Y.Max = 0, 1.3
		p.Y.Tick.Marker = plot.TickerFunc(unitTicks)
		p.X.Tick.Marker = plot.TickerFunc(integerTicks)
		p.Legend.Top = true
		p.Legend.Left = false
		return p
	}
	for _, m := range PDDModes() {
		for _, metric := range []struct {
			name, ylabel string
			y            func(PDDPoint) float64
		}{{"mre", "mean relative error (PDD eq. 4)", mre}, {"confidence", "confidence (decrypted / active clients)", conf}} {
			p := newPlot(fmt.Sprintf("%s: %d users × %d days, R = %d", m, r.Users, r.Days, r.RecoveryDays), metric.ylabel)
			var lines []any
			for _, gs := range sizes {
				lines = append(lines, fmt.Sprintf("gs = %d", gs),
					series(func(p PDDPoint) bool { return p.Mode == m && p.GroupSize == gs }, metric.y))
			}
			if err := plotutil.AddLinePoints(p, lines...); err != nil {
				return out, fmt.Errorf("simulate pdd: plot: %w", err)
			}
			if err := save(p, "pdd-"+metric.name+"-"+strings.ReplaceAll(string(m), "+", "-")); err != nil {
				return out, err
			}
		}
	}
	gs := sizes[0]
	if seen[PDDPlotGroupSize] {
		gs = PDDPlotGroupSize
	}
	p := newPlot(fmt.Sprintf("gs = %d: %d users × %d days, R = %d", gs, r.Users, r.Days, r.RecoveryDays), "mean relative error (PDD eq. 4)")
	var lines []any
	for _, m := range PDDModes() {
		lines = append(lines, string(m), series(func(p PDDPoint) bool { return p.Mode == m && p.GroupSize == gs }, mre))
	}
	var names []string // the Prio3 measurements, each at grace δ + 1
	xy := map[string]plotter.XYs{}
	for _, pt := range r.Prio3 {
		n := pt.Measurement.Name()
		if xy[n] == nil {
			names = append(names, n)
		}
		xy[n] = append(xy[n], plotter.XY{X: float64(pt.Grace - 1), Y: pt.MRE})
	}
	for _, n := range names {
		lines = append(lines, n+" (grace δ+1)", xy[n])
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return out, fmt.Errorf("simulate pdd: plot: %w", err)
	}
	return out, save(p, "pdd-mre-modes")
}

// integerTicks labels every whole number of days in [min, max].
func integerTicks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for x := int(lo); float64(x) <= hi; x++ {
		if float64(x) >= lo {
			ticks = append(ticks, plot.Tick{Value: float64(x), Label: fmt.Sprint(x)})
		}
	}
	return ticks
}

// unitTicks labels 0, 0.2, …, 1: fractions, whatever the axis headroom.
func unitTicks(float64, float64) []plot.Tick {
	var ticks []plot.Tick
	for i := 0; i <= 10; i++ {
		t := plot.Tick{Value: float64(i) / 10}
		if i%2 == 0 {
			t.Label = fmt.Sprintf("%.1f", t.Value)
		}
		ticks = append(ticks, t)
	}
	return ticks
}
