package simulate

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/crowdlog/crowdlog/release/policy"
)

// Plot writes two plots into dir, named APP-impressions.EXT and
// APP-artifacts.EXT, where ext is "svg" or "png" (gonum.org/v1/plot): the
// fraction of impressions (CrowdLogging Figure 3's y-axis) and of distinct
// artifacts released per policy against the threshold k. It returns the
// paths written.
func (r *Result) Plot(dir, ext string) ([]string, error) {
	if ext != "svg" && ext != "png" {
		return nil, fmt.Errorf("simulate: plot format %q: use svg or png", ext)
	}
	var out []string
	for _, m := range []struct {
		name, ylabel string
		y            func(Point) float64
	}{
		{"impressions", "fraction of impressions released", func(p Point) float64 { return p.ImpressionFrac }},
		{"artifacts", "fraction of distinct artifacts released", func(p Point) float64 { return p.ArtifactFrac }},
	} {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("crowdlog simulate: %s, %d users, ε = %.3g, δ = %.3g", r.App, r.Users, r.Epsilon, r.Delta)
		p.X.Label.Text = "threshold k (artifacts or users)"
		p.Y.Label.Text = m.ylabel
		p.Y.Min, p.Y.Max = 0, 1
		p.Legend.Top = true
		var lines []any
		for _, kind := range policy.Kinds() {
			var xy plotter.XYs
			for _, pt := range r.Points {
				if pt.Policy == kind {
					xy = append(xy, plotter.XY{X: float64(pt.K), Y: m.y(pt)})
				}
			}
			if len(xy) > 0 { // dp-su has no Figure 3 curve: its expectation is in APP-dp.csv
				lines = append(lines, string(kind), xy)
			}
		}
		if err := plotutil.AddLines(p, lines...); err != nil {
			return out, fmt.Errorf("simulate: plot: %w", err)
		}
		path := filepath.Join(dir, fmt.Sprintf("%s-%s.%s", r.App, m.name, ext))
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
			return out, fmt.Errorf("simulate: save plot %s: %w", path, err)
		}
		out = append(out, path)
	}
	return out, nil
}
