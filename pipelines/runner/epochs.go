package runner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
	"github.com/crowdlog/crowdlog/protocol"
)

// MaxEpochs bounds the epochs one replay is cut into (SplitEpochs): an
// epoch length far shorter than the log's span is a mistake, not a plan.
const MaxEpochs = 1000

// epochInput is one epoch of a replay: its name and the log of its
// records (AOL TSV).
type epochInput struct {
	Name           string
	Input          string
	Records, Users int
}

// EpochSummary is what Run did in one epoch.
type EpochSummary struct {
	Name                string
	Users               int   // clients that sent in the epoch
	Sent                int64 // reports they published
	Released            int   // released items
	ReleasedImpressions uint64
}

// SplitEpochs cuts the log at path into scheduled epochs of the given
// length: each record goes to the epoch its QueryTime falls in, named as
// the randomness service's schedule names it (protocol.ScheduleEpoch:
// START-LENGTH, START aligned to the Unix epoch in UTC, e.g.
// 20060227T000000Z-168h for a week). It writes one AOL TSV file per
// epoch under dir and returns the epochs in time order. Errors: the
// log's (open, read), writing dir, a length that is not a positive whole
// number of seconds, or more than MaxEpochs epochs.
func SplitEpochs(path string, length time.Duration, dir string) ([]epochInput, error) {
	if length <= 0 || length%time.Second != 0 {
		return nil, fmt.Errorf("epoch length %s: want a positive whole number of seconds, e.g. 168h", length)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("epochs: %w", err)
	}
	r, err := aol.Open(path)
	if err != nil {
		return nil, fmt.Errorf("epochs: %w", err)
	}
	defer r.Close()
	type out struct {
		e     epochInput
		f     *os.File
		w     *bufio.Writer
		users map[string]struct{}
	}
	files := map[string]*out{}
	defer func() {
		for _, o := range files {
			o.f.Close()
		}
	}()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("epochs: %w", err)
		}
		name := protocol.ScheduleEpoch(rec.QueryTime, length)
		o := files[name]
		if o == nil {
			if len(files) == MaxEpochs {
				return nil, fmt.Errorf("epochs: the log spans more than %d epochs of %s: use a longer epoch length", MaxEpochs, length)
			}
			p := filepath.Join(dir, name+".tsv")
			f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return nil, fmt.Errorf("epochs: %w", err)
			}
			o = &out{e: epochInput{Name: name, Input: p}, f: f, w: bufio.NewWriterSize(f, 1<<16), users: map[string]struct{}{}}
			o.w.WriteString(strings.Join(aol.Header, "\t") + "\n")
			files[name] = o
		}
		rank := ""
		if rec.ItemRank > 0 {
			rank = strconv.Itoa(rec.ItemRank)
		}
		fmt.Fprintf(o.w, "%s\t%s\t%s\t%s\t%s\n", rec.AnonID, rec.Query, rec.QueryTime.Format(aol.TimeLayout+".999999999"), rank, rec.ClickURL)
		o.e.Records++
		o.users[rec.AnonID] = struct{}{}
	}
	eps := make([]epochInput, 0, len(files))
	for _, o := range files {
		if err := o.w.Flush(); err != nil {
			return nil, fmt.Errorf("epochs: %w", err)
		}
		o.e.Users = len(o.users)
		eps = append(eps, o.e)
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("epochs: %s has no records", path)
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].Name < eps[j].Name })
	return eps, nil
}
