// Package apps holds crowdlog's mining applications: what an artifact
// is, and how one user's log turns into artifact instances (CrowdLogging,
// Feild et al. SIGIR 2011, §3.3 "Applications": an application starts with a
// user's local search log and produces search artifact instances;
// docs/architecture.md, step "mine artifacts").
package apps

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crowdlog/crowdlog/ingest/aol"
)

// Artifact is one mined artifact instance: Primary is the normalized artifact
// (what is counted and released), Secondary the original form.
// They are CrowdLogging §3.3's primary and secondary private fields.
//
// Primary is the grouping key of the threshold scheme (the bytes the OPRF
// randomness is derived from); Secondary travels only
// inside the AEAD payload and is revealed together with Primary once k users
// reported it. Time is the QueryTime of the log row the instance starts at;
// it selects the epoch.
type Artifact struct {
	Primary, Secondary string
	Time               time.Time
}

// App mines artifacts from one user's log, in time order.
//
// Mine receives all records of exactly one user (see aol.ReadUsers), in log
// order, and returns that user's artifact instances in the same order. It
// must be deterministic and must not retain records. Implementations are
// stateless and safe for concurrent use.
type App interface {
	// Name is the application name used in pipeline specs, on the command
	// line (--app) and in the released tables' app column.
	Name() string
	// Mine returns the artifact instances of one user's records.
	Mine(records []aol.Record) []Artifact
}

// registry maps application names to constructors; o has its defaults
// filled in (Options.withDefaults).
var registry = map[string]func(o Options) App{
	QueryAppName:         func(Options) App { return QueryApp{} },
	ReformulationAppName: func(o Options) App { return ReformulationApp{Gap: o.SessionGap, Sorted: o.PairOrder == PairSorted} },
	ClickAppName:         func(o Options) App { return ClickApp{Level: o.URLLevel} },
	URLAppName:           func(o Options) App { return URLApp{Level: o.URLLevel} },
	LTRAppName:           func(o Options) App { return LTRApp{Level: o.URLLevel, Buckets: o.Buckets} },
	KeywordAppName:       func(Options) App { return KeywordApp{} },
}

// Lookup returns the mining application called name (e.g. "query") with
// default Options. Errors: an unknown name; the message lists the known
// applications.
func Lookup(name string) (App, error) { return LookupWith(name, Options{}) }

// LookupWith returns the mining application called name configured by o
// (zero fields mean defaults; options an app does not use are ignored but
// still validated). Errors: an unknown name (the message lists the known
// applications) or an invalid option (the message names the flag).
func LookupWith(name string, o Options) (App, error) {
	mk, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("pipelines: unknown app %q (known apps: %s)", name, strings.Join(Apps(), ", "))
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return mk(o), nil
}

// Apps returns the names of all known applications, sorted.
func Apps() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
