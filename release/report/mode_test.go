package report_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/crowdlog/crowdlog/release"
	"github.com/crowdlog/crowdlog/release/report"
)

// TestReportStatesCampaignMode: the report states each PDD campaign's mode,
// ε, sensitivity and k from pdd_campaigns, for exact campaigns too (which
// spend nothing from the ledger, so the ledger cannot say): an exact Prio3
// campaign (S = 20, minimum batch 50), an exact groups campaign (max_count
// 3, group size 10) and a campaign without a pdd_campaigns row (a database
// written before the table existed: "mode not recorded"). Real ClickHouse;
// the rows are those the release stages write (WritePDDCampaign).
func TestReportStatesCampaignMode(t *testing.T) {
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := freshDB()
	w, err := release.Open(ctx, s.TCPAddr, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	day := time.Date(2006, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range []string{"exact-prio3", "exact-groups", "old"} {
		r := release.PDDRound{Campaign: name, Day: day, Active: 60, Grouped: 60, Decrypted: 60, Groups: 1, Complete: 1, Confidence: 1, MaxCount: 3,
			Counts: []release.KeywordCount{{Keyword: "flu", Count: 4}}}
		if err := w.WritePDDRound(ctx, r, at(1)); err != nil {
			t.Fatal(err)
		}
	}
	cs := []release.PDDCampaign{
		{Campaign: "exact-prio3", Mode: release.PDDModePrio3, Sensitivity: 20, K: 50, Params: "kind=sumvec bits=4 l1=20 keywords=300"},
		{Campaign: "exact-groups", Mode: release.PDDModeGroups, Sensitivity: 3, K: 10, Params: "max_count=3 keywords=300"},
	}
	for _, c := range cs {
		// twice: one row per configuration under FINAL
		for range 2 {
			if err := w.WritePDDCampaign(ctx, c, at(1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := w.ReadPDDCampaigns(ctx, "exact-prio3")
	if err != nil || len(got) != 1 || got[0] != cs[0] {
		t.Fatalf("ReadPDDCampaigns: %+v, %v; want [%+v]", got, err, cs[0])
	}
	d, err := report.Load(ctx, report.Options{Addr: s.TCPAddr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]string{}
	for _, c := range d.PDD {
		modes[c.Name] = c.Mode
	}
	if modes["exact-prio3"] != "prio3" || modes["exact-groups"] != "groups" || modes["old"] != "" {
		t.Errorf("modes %v, want exact-prio3 prio3, exact-groups groups, old none", modes)
	}
	var page bytes.Buffer
	if err := report.Render(&page, d); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{
		"Prio3 mode (two aggregators, one Laplace draw each per count); exact counts (ε = 0), S = 20 (one person&#39;s daily L1 bound), minimum batch 50 (kind=sumvec bits=4 l1=20 keywords=300)",
		"groups mode (blinded groups, one Laplace draw per count at the release stage); exact counts (ε = 0), max_count = 3, group size 10 (max_count=3 keywords=300)",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if n := strings.Count(html, "mode not recorded"); n != 1 {
		t.Errorf("%d campaigns with \"mode not recorded\", want 1 (the campaign without a pdd_campaigns row)", n)
	}
}
