package tests

import (
	"bytes"
	"encoding/json"
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
