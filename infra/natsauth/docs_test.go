package natsauth

import (
	"os"
	"strings"
	"testing"
)

// TestOperationsTable: docs/operations.md quotes the permission table as
// Markdown renders it, so the docs never drift from the code.
func TestOperationsTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), Markdown()) {
		t.Fatalf("docs/operations.md does not hold the permission table; paste the output of `crowdlog nats-config --table`:\n%s", Markdown())
	}
}
