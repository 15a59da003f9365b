package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/crowdlog/crowdlog"

// layerOf is the layer rule of docs/architecture.md: protocol and infra at
// the bottom (1), the client and the roles above them (2), pipelines (3),
// cmd and the example programs (4), tests (5). An example program embeds
// the client: it may import protocol, infra and the client (ingest) only. ok is false for a package outside the known folders.
func layerOf(rel string) (layer int, ok bool) {
	top, _, _ := strings.Cut(rel, "/")
	switch top {
	case "protocol", "infra":
		return 1, true
	case "ingest", "randomness", "relays", "aggregator", "coordinator", "release", "issuer":
		return 2, true
	case "pipelines":
		return 3, true
	case "cmd", "examples":
		return 4, true
	case "tests":
		return 5, true
	}
	return 0, false
}

// role is the top-level folder of a layer-2 package: "ingest" is the
// client, the others are servers.
func role(rel string) string {
	top, _, _ := strings.Cut(rel, "/")
	return top
}

// sharedClientPackages are client packages that server roles may read: the
// monitored keyword list of a PDD campaign, which the coordinator and the
// PDD release must interpret exactly as clients do.
var sharedClientPackages = map[string]bool{"ingest/keywords": true}

// layerViolations returns one line per import (non-test imports of imports)
// that breaks the rule: a package imports a higher layer; protocol imports
// anything but protocol; the client imports a server role; a role imports
// another role (but for sharedClientPackages); a package lies outside the
// known folders.
func layerViolations(imports map[string][]string) []string {
	var bad []string
	for pkg, deps := range imports {
		l, ok := layerOf(pkg)
		if !ok {
			bad = append(bad, pkg+": not in a known top-level folder (protocol, infra, ingest, randomness, relays, aggregator, coordinator, release, issuer, pipelines, cmd, examples, tests)")
			continue
		}
		for _, d := range deps {
			dl, ok := layerOf(d)
			if !ok {
				continue // reported as a package of its own
			}
			switch {
			case dl > l:
				bad = append(bad, pkg+" imports "+d+": a higher layer")
			case role(pkg) == "protocol" && role(d) != "protocol":
				bad = append(bad, pkg+" imports "+d+": protocol imports only protocol")
			case role(pkg) == "examples" && dl >= 2 && role(d) != "ingest":
				bad = append(bad, pkg+" imports "+d+": an example embeds the client and imports only protocol, infra and ingest")
			case l == 2 && dl == 2 && role(pkg) != role(d):
				if role(pkg) == "ingest" {
					bad = append(bad, pkg+" imports "+d+": a client package imports a server package")
				} else if !sharedClientPackages[d] {
					bad = append(bad, pkg+" imports "+d+": a role imports another role")
				}
			}
		}
	}
	return bad
}

// TestLayers runs the layer rule over `go list -json ./...`.
func TestLayers(t *testing.T) {
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		for _, d := range p.Imports {
			if r, ok := strings.CutPrefix(d, module+"/"); ok {
				imports[rel] = append(imports[rel], r)
			}
		}
		if _, ok := imports[rel]; !ok {
			imports[rel] = nil
		}
	}
	if len(imports) < 20 {
		t.Fatalf("go list found %d packages; run from the repository", len(imports))
	}
	for _, v := range layerViolations(imports) {
		t.Error(v)
	}
}

// TestLayerRuleCatches checks that the rule rejects each kind of violation,
// so a passing TestLayers means something.
func TestLayerRuleCatches(t *testing.T) {
	for _, c := range []struct {
		pkg, dep string
	}{
		{"ingest", "pipelines/runner"},      // higher layer
		{"ingest/pdd", "coordinator"},       // client imports server
		{"ingest/publish", "relays"},        // client imports server
		{"release/pdd", "aggregator"},       // role imports role
		{"protocol/star", "infra/kafka"},    // protocol imports outside protocol
		{"aggregator", "cmd/crowdlog"},      // higher layer
		{"infra/kafka", "release"},          // higher layer
		{"attack", "protocol"},              // unknown top-level folder
		{"pipelines/runner", "tests/truth"}, // higher layer
		{"examples/embed", "randomness"},    // an example imports a server
		{"examples/embed", "pipelines/runner"},
		{"ingest/tokenclient", "issuer"}, // client imports server
		{"randomness", "issuer"},         // role imports role
	} {
		if v := layerViolations(map[string][]string{c.pkg: {c.dep}}); len(v) == 0 {
			t.Errorf("%s importing %s passes the layer rule", c.pkg, c.dep)
		}
	}
	for _, c := range []struct{ pkg, dep string }{
		{"coordinator", "ingest/keywords"}, {"pipelines/runner", "ingest"}, {"ingest", "protocol/star"},
		{"release/stage", "release"}, {"tests", "pipelines/runner"}, {"cmd/crowdlog", "infra/metrics"},
		{"examples/embed", "ingest"}, {"examples/embed", "protocol/star"},
		{"issuer", "protocol/token"}, {"ingest/tokenclient", "protocol/token"},
	} {
		if v := layerViolations(map[string][]string{c.pkg: {c.dep}}); len(v) != 0 {
			t.Errorf("%s importing %s is allowed, got %v", c.pkg, c.dep, v)
		}
	}
}

// clientForbidden says why dep (an import path) may not be linked into a
// client program (an ingest/... package or an examples/... program), or ""
// when it may: a Kafka client or broker (kafka-go, franz-go and its kfake),
// a ClickHouse driver (clickhouse-go, chDB), the NATS server, deployment
// tooling (Helm), or one of this module's server packages (the roles, the
// pipelines, the command, infra/kafka, infra/clickhouse, infra/natsserver,
// infra/deploy).
func clientForbidden(dep string) string {
	for _, p := range []struct{ prefix, why string }{
		{"github.com/segmentio/kafka-go", "a Kafka client"},
		{"github.com/twmb/franz-go", "a Kafka client (franz-go, kfake)"},
		{"github.com/ClickHouse/", "a ClickHouse driver"},
		{"github.com/chdb-io/", "a ClickHouse driver (chDB)"},
		{"github.com/nats-io/nats-server", "the NATS server"},
		{"helm.sh/", "deployment tooling"},
	} {
		if root := strings.TrimSuffix(p.prefix, "/"); dep == root || strings.HasPrefix(dep, root+"/") {
			return p.why
		}
	}
	rel, ok := strings.CutPrefix(dep, module+"/")
	if !ok {
		return ""
	}
	switch top, _, _ := strings.Cut(rel, "/"); top {
	case "aggregator", "relays", "coordinator", "randomness", "release", "issuer", "pipelines", "cmd":
		return "a server package"
	}
	for _, p := range []string{"infra/kafka", "infra/clickhouse", "infra/natsserver", "infra/deploy"} {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return "a server package (" + p + ")"
		}
	}
	return ""
}

// TestClientDeps checks that no client package (ingest/...) and no example
// program (examples/...) links, directly or through any import, a Kafka
// client, kfake, a ClickHouse driver or a server package
// (clientForbidden): an app that embeds the client links only what the
// client needs.
func TestClientDeps(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./ingest/...", "./examples/...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		n++
		var bad []string
		for _, d := range f[1:] {
			if why := clientForbidden(d); why != "" {
				bad = append(bad, d+" ("+why+")")
			}
		}
		if len(bad) > 0 {
			more := ""
			if len(bad) > 4 {
				more = fmt.Sprintf(" and %d more", len(bad)-4)
				bad = bad[:4]
			}
			t.Errorf("%s links %s%s", strings.TrimPrefix(f[0], module+"/"), strings.Join(bad, ", "), more)
		}
	}
	if n < 10 {
		t.Fatalf("go list found %d client packages; run from the repository", n)
	}
}

// TestClientForbiddenCatches checks that clientForbidden rejects each kind
// of dependency a client must not link, and allows what a client needs.
func TestClientForbiddenCatches(t *testing.T) {
	for _, d := range []string{
		"github.com/segmentio/kafka-go", "github.com/segmentio/kafka-go/protocol/fetch",
		"github.com/twmb/franz-go/pkg/kfake", "github.com/twmb/franz-go/pkg/kmsg",
		"github.com/ClickHouse/clickhouse-go/v2", "github.com/chdb-io/chdb-go/chdb",
		"github.com/nats-io/nats-server/v2/server",
		module + "/infra/kafka", module + "/infra/clickhouse", module + "/infra/natsserver",
		module + "/aggregator", module + "/relays/pool", module + "/coordinator", module + "/randomness",
		module + "/release/pdd", module + "/issuer", module + "/pipelines/runner", module + "/cmd/crowdlog",
	} {
		if clientForbidden(d) == "" {
			t.Errorf("a client may link %s", d)
		}
	}
	for _, d := range []string{
		"github.com/nats-io/nats.go", "github.com/nats-io/nats.go/jetstream", "github.com/cloudflare/circl/vdaf/prio3/count",
		module + "/protocol/star", module + "/infra/natsconn", module + "/infra/keydir", module + "/ingest/publish",
		module + "/infra/kafkaish", "github.com/segmentio/other",
	} {
		if why := clientForbidden(d); why != "" {
			t.Errorf("%s is forbidden (%s)", d, why)
		}
	}
}
