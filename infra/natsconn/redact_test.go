package natsconn

import (
	"strings"
	"testing"
)

// TestRedactURLs: a URL's password never reaches an error or a log line;
// addresses without one are kept as given.
func TestRedactURLs(t *testing.T) {
	got := RedactURLs("nats://relay:s3cret@n1:4222,tls://n2:4222,127.0.0.1:4222")
	if strings.Contains(got, "s3cret") || got != "nats://relay:xxxxx@n1:4222,tls://n2:4222,127.0.0.1:4222" {
		t.Fatalf("RedactURLs = %q", got)
	}
}
