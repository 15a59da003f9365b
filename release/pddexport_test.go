package release

import (
	"bytes"
	"testing"
	"time"
)

// TestPDDExportDaysAndZeros: released days list every keyword of the list
// (zeros included, or left out on request), a lost day and a day refused
// over the budget are one withheld line each, a day released after a
// refusal is released, and a keyword with a backslash is escaped as
// ClickHouse's TabSeparated format does.
func TestPDDExportDaysAndZeros(t *testing.T) {
	d := func(n int) time.Time { return time.Date(2006, 3, n, 0, 0, 0, 0, time.UTC) }
	rounds := []PDDRound{
		{Campaign: "c", Day: d(1), Active: 4, Decrypted: 4, Groups: 2, Complete: 2, Confidence: 1},
		{Campaign: "c", Day: d(2), Active: 4, Groups: 2, Lost: 2},
		{Campaign: "c", Day: d(4), Active: 4, Decrypted: 2, Groups: 2, Complete: 1, Lost: 1, Confidence: 0.5, Epsilon: 0.5},
	}
	withheld := []PDDWithheld{
		{Campaign: "c", Day: d(3), Reason: WithheldBudget, Detail: "over"},
		{Campaign: "c", Day: d(4), Reason: WithheldBudget, Detail: "refused, then released with a larger budget"},
		{Campaign: "c", Day: d(5), Reason: WithheldMinBatch},
	}
	days := PDDDays(rounds, withheld)
	var got []string
	for _, x := range days {
		got = append(got, x.Day.Format("01-02")+":"+x.Reason)
	}
	if want := "[03-01: 03-02:lost 03-03:budget 03-04: 03-05:below_min_batch]"; fmtSlice(got) != want {
		t.Fatalf("days %s, want %s", fmtSlice(got), want)
	}
	daily := []KeywordDaily{{Campaign: "c", Day: d(1), Keyword: `a\b`, Count: 3, Confidence: 1},
		{Campaign: "c", Day: d(4), Keyword: "z", Count: -2, Confidence: 0.5}}
	var buf bytes.Buffer
	if err := WritePDDExport(&buf, "c", []string{"z", `a\b`}, days, daily, true); err != nil {
		t.Fatal(err)
	}
	want := PDDExportHeader + "\n" +
		"c\t2006-03-01\tz\t0\t1\t0\treleased\t\n" +
		"c\t2006-03-01\ta\\\\b\t3\t1\t0\treleased\t\n" +
		"c\t2006-03-02\t\t\t\t\twithheld\tlost\n" +
		"c\t2006-03-03\t\t\t\t\twithheld\tbudget\n" +
		"c\t2006-03-04\tz\t-2\t0.5\t0.5\treleased\t\n" +
		"c\t2006-03-04\ta\\\\b\t0\t0.5\t0.5\treleased\t\n" +
		"c\t2006-03-05\t\t\t\t\twithheld\tbelow_min_batch\n"
	if buf.String() != want {
		t.Fatalf("export\n%s\nwant\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := WritePDDExport(&buf, "c", []string{"z", `a\b`, "y"}, days[:1], daily[:1], false); err != nil {
		t.Fatal(err)
	}
	if want := PDDExportHeader + "\nc\t2006-03-01\ta\\\\b\t3\t1\t0\treleased\t\n"; buf.String() != want {
		t.Fatalf("non-zero export\n%q\nwant\n%q", buf.String(), want)
	}
}

func fmtSlice(s []string) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, x := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x)
	}
	b.WriteByte(']')
	return b.String()
}
