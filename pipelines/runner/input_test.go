package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
)

// TestRunNoRecordsFailsFast: a log without a valid record ends Run before
// any service starts (no nats, kafka or clickhouse directory appears in the
// state directory), with an error naming the first bad lines and what was
// expected. No ClickHouse is needed: nothing is started.
func TestRunNoRecordsFailsFast(t *testing.T) {
	cases := []struct {
		name, content, format string
		want                  []string // fragments of the error
	}{
		{"empty", "", "", []string{"no records in", "it is empty", "RFC 3339", "--time-format"}},
		{"header only", "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n", "", []string{"only a header line"}},
		{"excite with another format", "2A9E\t16.09.1997 10:54\tweather\n2A9E\t16.09.1997 10:55\tnews\n\n",
			"", []string{"all 3 lines are bad", "line 1: " + aol.ReasonTime, "line 2: " + aol.ReasonTime,
				"line 3: " + aol.ReasonFieldCount, "yymmddHHMMSS", "--time-format"}},
		{"wrong given format", "7\tweather\t970916105432\n", aol.FormatUnix,
			[]string{"line 1: " + aol.ReasonTimeLayout, `time format given was "unix"`}},
		{"many bad lines", strings.Repeat("garbage\n", 40), "", []string{"line 1: ", "line 5: ", "and 35 more"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "log.tsv")
			if err := os.WriteFile(in, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(dir, "state")
			// a bound for the test itself; Run must not get near it
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sum, err := Run(ctx, Config{Input: in, TimeFormat: c.format, App: "query", Policy: "ft-u", K: 2, StateDir: state})
			if !errors.Is(err, ErrNoRecords) {
				t.Fatalf("Run = %v, %v; want an error wrapping ErrNoRecords", sum, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			for _, sub := range []string{"nats", "kafka", "clickhouse", "keys"} {
				if _, err := os.Stat(filepath.Join(state, sub)); err == nil {
					t.Errorf("%s started before the input was checked", sub)
				}
			}
		})
	}
}

// TestIngestNoRecordsFailsFast: crowdlog ingest checks its input the same
// way, before it loads keys or dials NATS (neither exists here).
func TestIngestNoRecordsFailsFast(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "log.tsv")
	if err := os.WriteFile(in, []byte("garbage\nmore garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Ingest(ctx, IngestConfig{Input: in, App: "query", Policy: "ft-u", K: 2,
		KeysDir: filepath.Join(dir, "no-keys"), NATS: "nats://127.0.0.1:1"})
	if !errors.Is(err, ErrNoRecords) || !strings.Contains(err.Error(), "line 1: ") {
		t.Fatalf("Ingest = %v; want ErrNoRecords naming line 1", err)
	}
}

// TestCheckInputSpool: the spool written for a given time format, and for
// stdin, reads back with default options as the same records (times and
// fields equal; only line numbers differ), and the users are counted.
func TestCheckInputSpool(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "log.tsv")
	content := "u1\tcheap flights\t16/09/1997 10:54:32\t1\thttp://example.com/a\n" +
		"not a record\n" +
		"u1\t  spaced  query \t16/09/1997 10:55:01\n" +
		"u2\t-\t17/09/1997 00:00:00\t\t\n"
	if err := os.WriteFile(in, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := aol.Options{TimeFormat: "02/01/2006 15:04:05"}
	spool := filepath.Join(dir, SpoolName)
	c, err := CheckInput(in, opts, spool)
	if err != nil {
		t.Fatal(err)
	}
	if c.Users != 2 || c.Stats.Records != 3 || c.Stats.Bad != 1 || c.Stats.Examples[0].Line != 2 {
		t.Fatalf("check %+v", c)
	}
	want := []aol.Record{
		{AnonID: "u1", Query: "cheap flights", QueryTime: time.Date(1997, 9, 16, 10, 54, 32, 0, time.UTC), ItemRank: 1, ClickURL: "http://example.com/a"},
		{AnonID: "u1", Query: "  spaced  query ", QueryTime: time.Date(1997, 9, 16, 10, 55, 1, 0, time.UTC)},
		{AnonID: "u2", Query: "-", QueryTime: time.Date(1997, 9, 17, 0, 0, 0, 0, time.UTC)},
	}
	checkSpool := func(path string) {
		t.Helper()
		var got []aol.Record
		st, err := aol.ReadUsers(path, func(u aol.User) error { got = append(got, u.Records...); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if st.Bad != 0 || !st.Header || len(got) != len(want) {
			t.Fatalf("spool: stats %v, %d records", st, len(got))
		}
		for i := range want {
			got[i].Line = 0
			if !got[i].QueryTime.Equal(want[i].QueryTime) {
				t.Errorf("spool record %d time %v, want %v", i, got[i].QueryTime, want[i].QueryTime)
			}
			got[i].QueryTime, want[i].QueryTime = time.Time{}, time.Time{}
			if got[i] != want[i] {
				t.Errorf("spool record %d = %+v, want %+v", i, got[i], want[i])
			}
		}
	}
	checkSpool(spool)

	// stdin, RFC 3339 with fractions and offsets, detected
	want = []aol.Record{
		{AnonID: "u3", Query: "weather", QueryTime: time.Date(2006, 3, 1, 5, 17, 12, 500_000_000, time.UTC)},
	}
	f, err := os.CreateTemp(dir, "stdin")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("u3\tweather\t2006-03-01T07:17:12.5+02:00\n")
	f.Seek(0, 0)
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old; f.Close() }()
	stdinSpool := filepath.Join(dir, "stdin-"+SpoolName)
	if c, err = CheckInput(aol.Stdin, aol.Options{}, stdinSpool); err != nil || c.Users != 1 || c.Stats.TimeFormat != "RFC 3339" {
		t.Fatalf("stdin: %+v %v", c, err)
	}
	checkSpool(stdinSpool)
}

// TestWaitBoundedNamesStage: an expired bound is an error naming the stage,
// the bound and the counts; a permanent error ends the wait at once; a
// cancelled parent says it stopped.
func TestWaitBoundedNamesStage(t *testing.T) {
	ctx := context.Background()
	polls := 0
	err := waitBounded(ctx, "the release of query/2006-03-01", 300*time.Millisecond,
		func(context.Context) (bool, error) { polls++; return false, errors.New("not yet") },
		func(context.Context) string { return "0 of 3 groups summed" })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	for _, w := range []string{"waited 300ms for the release of query/2006-03-01: 0 of 3 groups summed", "last error: not yet", "--timeout"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
	if polls < 2 {
		t.Errorf("polled %d times", polls)
	}

	stop := errors.New("refused over budget")
	err = waitBounded(ctx, "x", time.Hour, func(context.Context) (bool, error) { return false, &permanent{stop} },
		func(context.Context) string { return "" })
	if err != stop {
		t.Errorf("permanent: err %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	err = waitBounded(cctx, "the relays to drain", time.Hour, func(context.Context) (bool, error) { return false, nil },
		func(context.Context) string { return "" })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped waiting for the relays to drain") {
		t.Errorf("cancelled: err %v", err)
	}

	// the old form (crowdlog pdd) is bounded by its context's deadline
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	err = waitFor(dctx, "the vectors aggregator", func() (bool, error) { return false, nil })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the vectors aggregator") {
		t.Errorf("waitFor: err %v", err)
	}
}

func TestBoundedNamesStage(t *testing.T) {
	err := bounded(context.Background(), "the ClickHouse schema at 127.0.0.1:1", 100*time.Millisecond, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waited 100ms for the ClickHouse schema at 127.0.0.1:1") {
		t.Errorf("err %v", err)
	}
	// an error of fn's own is returned as it is
	own := errors.New("connection refused")
	if err := bounded(context.Background(), "x", time.Hour, func(context.Context) error { return own }); err != own {
		t.Errorf("err %v, want fn's", err)
	}
}

func TestPipelineCounts(t *testing.T) {
	if s := pipelineCounts(7, nil, nil); s != "clients sent 7 reports (roles run elsewhere: see their metrics)" {
		t.Errorf("external: %q", s)
	}
}
