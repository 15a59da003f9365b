package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/crowdlog/crowdlog/protocol"
)

// crowdlogArgs walks a parsed YAML tree and returns the argument lists of
// every container or compose service running the crowdlog image.
func crowdlogArgs(node any, out *[][]string) {
	switch n := node.(type) {
	case map[string]any:
		if img, _ := n["image"].(string); len(img) >= 8 && img[:8] == "crowdlog" {
			for _, key := range []string{"args", "command"} {
				if list, ok := n[key].([]any); ok {
					var args []string
					for _, a := range list {
						args = append(args, a.(string))
					}
					*out = append(*out, args)
				}
			}
		}
		for _, v := range n {
			crowdlogArgs(v, out)
		}
	case []any:
		for _, v := range n {
			crowdlogArgs(v, out)
		}
	}
}

// TestDeployManifests validates infra/deploy/*.yaml (compose; Kubernetes
// is the Helm chart, tested in infra/deploy/helm) with our own tools: every
// document parses, every crowdlog container's arguments are accepted by this
// binary's command and flag parser, and a KEDA trigger, if any, names the
// aggregator's consumer group and topic.
func TestDeployManifests(t *testing.T) {
	files, _ := filepath.Glob("../../infra/deploy/*.yaml")
	if len(files) < 1 {
		t.Fatalf("manifests not found: %v", files)
	}
	var all [][]string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			crowdlogArgs(doc, &all)
			if doc["kind"] == "ScaledObject" {
				spec := doc["spec"].(map[string]any)
				for _, tr := range spec["triggers"].([]any) {
					md := tr.(map[string]any)["metadata"].(map[string]any)
					if md["topic"] != protocol.ReportsTopic || md["consumerGroup"] != "crowdlog-aggregator" {
						t.Errorf("%s: KEDA trigger %v does not match the aggregator", f, md)
					}
				}
			}
		}
	}
	if len(all) < 9 {
		t.Fatalf("found only %d crowdlog containers", len(all))
	}
	for _, args := range all {
		root := rootCmd()
		cmd, rest, err := root.Find(args)
		if err != nil || cmd == root {
			t.Errorf("%v: not a crowdlog subcommand: %v", args, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestComposeNetworks: in infra/deploy/compose.yaml every crowdlog service
// joins exactly one network, its operator's, and that network is internal.
func TestComposeNetworks(t *testing.T) {
	b, err := os.ReadFile("../../infra/deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Image    string   `yaml:"image"`
			Networks []string `yaml:"networks"`
		} `yaml:"services"`
		Networks map[string]struct {
			Internal bool `yaml:"internal"`
		} `yaml:"networks"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, s := range c.Services {
		if s.Image != "crowdlog:dev" {
			continue
		}
		n++
		if len(s.Networks) != 1 || !c.Networks[s.Networks[0]].Internal {
			t.Errorf("service %s: networks %v, want one internal network of its operator", name, s.Networks)
		}
	}
	if n < 5 {
		t.Fatalf("only %d crowdlog services", n)
	}
}
