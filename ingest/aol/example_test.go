package aol_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/crowdlog/crowdlog/ingest/aol"
)

// An Excite-style log (AnonID, QueryTime as yymmddHHMMSS, Query): the time
// format and column order are detected from the first good line. The
// queries are made up.
func ExampleNewReaderOptions() {
	log := "A1F3\t970916105432\tcheap flights\n" +
		"A1F3\t970916105501\tcheap flights boston\n" +
		"B7C2\t2006-03-01 07:17:12\tnot this file's format\n" +
		"B7C2\t970916110003\tweather\n"
	r, err := aol.NewReaderOptions(strings.NewReader(log), aol.Options{})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(rec.Line, rec.AnonID, rec.QueryTime.Format("2006-01-02 15:04:05"), rec.Query)
	}
	st := r.Stats()
	fmt.Println(st.TimeFormat, "|", st.Columns)
	fmt.Println(st.Examples[0].Line, st.Examples[0].Reason)
	// Output:
	// 1 A1F3 1997-09-16 10:54:32 cheap flights
	// 2 A1F3 1997-09-16 10:55:01 cheap flights boston
	// 4 B7C2 1997-09-16 11:00:03 weather
	// yymmddHHMMSS | Excite (AnonID QueryTime Query)
	// 3 bad QueryTime (want yymmddHHMMSS in the second column, as on the first good line)
}

// A time layout the reader does not detect, given as a Go layout
// (Options.TimeFormat, `--time-format` on the command line).
func ExampleOptions() {
	log := "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n" +
		"17\tweather\t01/03/2006 07:17\t1\thttp://example.com\n"
	r, err := aol.NewReaderOptions(strings.NewReader(log), aol.Options{TimeFormat: "02/01/2006 15:04"})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.AnonID, rec.Query, rec.QueryTime, rec.ItemRank, rec.ClickURL)
	fmt.Println(r.Stats())
	// Output:
	// 17 weather 2006-03-01 07:17:00 +0000 UTC 1 http://example.com
	// 2 lines, 1 records, 0 bad, header: yes, time format: 02/01/2006 15:04, columns: AOL (AnonID Query QueryTime [ItemRank ClickURL])
}

// ReadUsersOptions groups a log by user (the path "-" reads standard
// input). Here a log with Unix-seconds times, written to a temporary file.
func ExampleReadUsersOptions() {
	f, err := os.CreateTemp("", "example-log-*.tsv")
	if err != nil {
		panic(err)
	}
	defer os.Remove(f.Name())
	fmt.Fprint(f, "9\tweather\t1141197432\n8\tnews\t1141197500\n9\tweather radar\t1141197460\n")
	f.Close()
	st, err := aol.ReadUsersOptions(f.Name(), aol.Options{TimeFormat: aol.FormatUnix}, func(u aol.User) error {
		fmt.Println(u.AnonID, len(u.Records), u.Records[0].QueryTime)
		return nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Records, "records,", st.Bad, "bad")
	// Output:
	// 9 2 2006-03-01 07:17:12 +0000 UTC
	// 8 1 2006-03-01 07:18:20 +0000 UTC
	// 3 records, 0 bad
}
