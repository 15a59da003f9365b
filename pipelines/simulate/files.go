package simulate

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Output is what both simulations write: a CSV and plots (*Result and
// *PDDResult).
type Output interface {
	WriteCSV(w io.Writer) error
	Plot(dir, ext string) ([]string, error)
}

// WriteFiles writes r's CSV as dir/name and its plots (format "svg" or
// "png") into dir, creating dir; it returns the paths written.
func WriteFiles(dir, name, format string, r Output) (csvPath string, plots []string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	csvPath = filepath.Join(dir, name)
	f, err := os.Create(csvPath)
	if err != nil {
		return "", nil, err
	}
	if err := r.WriteCSV(f); err != nil {
		f.Close()
		return "", nil, err
	}
	if err := f.Close(); err != nil {
		return "", nil, err
	}
	plots, err = r.Plot(dir, format)
	return csvPath, plots, err
}

// summaryKs are the thresholds WriteSummary prints.
var summaryKs = map[int]bool{1: true, 5: true, 10: true, 20: true, 50: true, 100: true, 160: true}

// WriteSummary writes a few lines for a terminal: the log's size, (ε, δ)
// and, for k in {1, 5, 10, 20, 50, 100, 160}, each policy's released
// artifacts and impressions.
func (r *Result) WriteSummary(w io.Writer) error {
	fmt.Fprintf(w, "crowdlog simulate: app %s, %d users, %d impressions, %d distinct artifacts, ε=%.4g δ=%.4g\n",
		r.App, r.Users, r.Impressions, r.Artifacts, r.Epsilon, r.Delta)
	fmt.Fprintln(w, "policy   k  param  artifacts  impressions  (fraction of impressions)")
	for _, p := range r.Points {
		if summaryKs[p.K] {
			if _, err := fmt.Fprintf(w, "%-8s %3d %5d %10d %12d  %.4f\n", p.Policy, p.K, p.Param, p.Artifacts, p.Impressions, p.ImpressionFrac); err != nil {
				return err
			}
		}
	}
	return nil
}
