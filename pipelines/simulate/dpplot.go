package simulate

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot writes APP-dp.EXT into dir (ext "svg" or "png", gonum.org/v1/plot):
// the expected number of released artifacts against the parameter (d or
// m), one line per policy, Google's PreAggSelectPartition included. It
// returns the path written.
func (r *DPResult) Plot(dir, ext string) ([]string, error) {
	if ext != "svg" && ext != "png" {
		return nil, fmt.Errorf("simulate: plot format %q: use svg or png", ext)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("expected DP release: %s, %d users, ε = %.3g, δ = %.3g", r.App, r.Users, r.Epsilon, r.Delta)
	p.X.Label.Text = "parameter d (dp-a, dp-u, dp-su) or m (zealous, dp-gsu, google-preagg)"
	p.Y.Label.Text = "expected released artifacts"
	p.Y.Min = 0
	p.Legend.Top = true
	var lines []any
	for _, pol := range r.policies() {
		var xy plotter.XYs
		for _, row := range r.Rows {
			if row.Policy == pol && row.Err == "" {
				xy = append(xy, plotter.XY{X: float64(row.Param), Y: row.ExpectedReleased})
			}
		}
		if len(xy) > 0 {
			lines = append(lines, r.legend(pol), xy)
		}
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, fmt.Errorf("simulate: plot: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-dp.%s", r.App, ext))
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return nil, fmt.Errorf("simulate: save plot %s: %w", path, err)
	}
	return []string{path}, nil
}

// legend labels a policy's line; google-preagg's names the selection
// strategy of each m (the library switches at m = 3).
func (r *DPResult) legend(pol string) string {
	if pol != GooglePreAgg {
		return pol
	}
	var magic, gauss []string
	for _, row := range r.Rows {
		if row.Policy != pol || row.Err != "" {
			continue
		}
		if row.Selection == SelectMagic {
			magic = append(magic, strconv.Itoa(row.Param))
		} else {
			gauss = append(gauss, strconv.Itoa(row.Param))
		}
	}
	var parts []string
	if len(magic) > 0 {
		parts = append(parts, "magic m="+strings.Join(magic, ","))
	}
	if len(gauss) > 0 {
		parts = append(parts, "Gaussian δ/2 m="+strings.Join(gauss, ","))
	}
	return pol + " (" + strings.Join(parts, "; ") + ")"
}
