package simulate

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
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

// Report writes r's files under files (APP.csv and APP-dp.csv with their
// plots, WriteFiles), then to w its summary, the DP summary and the files
// written.
func (r *Result) Report(w io.Writer, files Files) error {
	csvPath, plots, err := WriteFiles(files.Dir, r.App+".csv", files.Format, r)
	if err != nil {
		return err
	}
	dpCSV, dpPlots, err := WriteFiles(files.Dir, r.App+"-dp.csv", files.Format, r.DP)
	if err != nil {
		return err
	}
	if err := r.WriteSummary(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := r.DP.WriteSummary(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "wrote", csvPath, plots, dpCSV, dpPlots)
	return nil
}

// Report writes pdd.csv, pdd-modes.csv (WriteModesCSV) and the plots
// under files, then to w the table, the campaign modes, the search content of input with the times taken, and the files
// written.
func (r *PDDResult) Report(w io.Writer, files Files, input string) error {
	csvPath, plots, err := WriteFiles(files.Dir, "pdd.csv", files.Format, r)
	if err != nil {
		return err
	}
	modes := filepath.Join(files.Dir, "pdd-modes.csv")
	f, err := os.Create(modes)
	if err != nil {
		return err
	}
	if err := r.WriteModesCSV(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := r.WriteTable(w); err != nil {
		return err
	}
	if err := r.WriteModesTable(w); err != nil {
		return err
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Fprintf(w, "\nsearch content: %d query instances (%d distinct) of %s; took %s (load %s, draw %s, evaluate %s)\n",
		r.Instances, r.Queries, input, ms(r.LoadTime+r.GenerateTime+r.EvaluateTime), ms(r.LoadTime), ms(r.GenerateTime), ms(r.EvaluateTime))
	fmt.Fprintln(w, "wrote", csvPath, modes, plots)
	return nil
}

// WriteZipfLogFile writes the log of o (WriteZipfLog) to the file path.
func WriteZipfLogFile(path string, o ZipfLogOptions) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("zipf-log: %w", err)
	}
	if err := WriteZipfLog(f, o); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("zipf-log: %w", err)
	}
	return nil
}
