package release

import (
	_ "embed"
	"strings"
)

// Views is the DDL of the analyst views (reformulation_pairs,
// reformulation_proportions, click_pairs, url_popularity, ltr_features,
// keyword_counts) as run by Open after Schema: CREATE VIEW IF NOT EXISTS
// statements separated by ";", valid on ClickHouse 18.16 and current
// releases, unqualified (created in Open's database). What each column
// means, in particular the reformulation proportions of CrowdLogging §3.3,
// is documented in views.sql and docs/applications.md.
//
//go:embed views.sql
var Views string

// ViewStatements splits Views into single statements (comment lines
// removed), in order.
func ViewStatements() []string { return splitStatements(Views) }

// splitStatements splits DDL text into statements: whole-line "--"
// comments are dropped, statements end at ";", empty ones are skipped.
func splitStatements(ddl string) []string {
	var lines []string
	for _, l := range strings.Split(ddl, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--") {
			continue
		}
		lines = append(lines, l)
	}
	var out []string
	for _, s := range strings.Split(strings.Join(lines, "\n"), ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
