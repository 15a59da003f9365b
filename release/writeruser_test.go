package release

import (
	"strings"
	"testing"
)

// TestWriterStatements: on servers with SQL users the writer is created
// without default roles, every global grant revoked, with grants on the
// release and analyst databases only, none of them DROP; names and passwords that would break the statements are refused.
func TestWriterStatements(t *testing.T) {
	stmts, err := WriterStatements(WriterAccount{Name: "crowdlog_writer", Password: "s3cret"}, "crowdlog")
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 4 || stmts[0] != "CREATE USER OR REPLACE `crowdlog_writer` IDENTIFIED WITH sha256_password BY 's3cret' DEFAULT ROLE NONE" ||
		stmts[1] != "REVOKE ALL ON *.* FROM `crowdlog_writer`" {
		t.Fatalf("statements %q", stmts)
	}
	for _, s := range stmts[2:] {
		if strings.Contains(s, "DROP") || !strings.HasPrefix(s, "GRANT SELECT, INSERT, CREATE TABLE, CREATE VIEW, ALTER ON `crowdlog") {
			t.Errorf("grant %q", s)
		}
	}
	if !strings.Contains(stmts[3], "`crowdlog_analyst`.*") {
		t.Errorf("no grant on the analyst database: %q", stmts[3])
	}
	for _, c := range []struct {
		w  WriterAccount
		db string
	}{
		{WriterAccount{"default", "p"}, "crowdlog"},
		{WriterAccount{"w x", "p"}, "crowdlog"},
		{WriterAccount{"w", ""}, "crowdlog"},
		{WriterAccount{"w", "it's"}, "crowdlog"},
		{WriterAccount{"w", "p"}, "crowd log"},
	} {
		if _, err := WriterStatements(c.w, c.db); err == nil {
			t.Errorf("%+v on %q: accepted", c.w, c.db)
		}
	}
}
