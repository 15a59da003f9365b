package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// respell gives the flags of c one spelling per concept across roles
// (--keys for a keys directory, --clickhouse for a ClickHouse address):
// old maps a former name to the flag's name, and the former name keeps
// working on the command line as the same flag (pflag normalization), so
// scripts written for it do not break. Help shows the one spelling.
func respell(c *cobra.Command, old map[string]string) {
	f := c.Flags()
	prev := f.GetNormalizeFunc()
	f.SetNormalizeFunc(func(fs *pflag.FlagSet, name string) pflag.NormalizedName {
		if n, ok := old[name]; ok {
			name = n
		}
		return prev(fs, name)
	})
}

// listFlag is a list flag (repeatable, comma-separated, like pflag's
// StringSlice) kept as one comma-joined string: how run and pdd take
// --kafka, a list on every role.
type listFlag struct {
	p       *string
	changed bool
}

func newListFlag(p *string) *listFlag { return &listFlag{p: p} }

func (l *listFlag) String() string { return *l.p }

func (l *listFlag) Set(v string) error {
	if !l.changed || *l.p == "" {
		*l.p, l.changed = v, true
		return nil
	}
	*l.p += "," + v
	return nil
}

func (l *listFlag) Type() string { return "strings" }

// Append, Replace and GetSlice make it a pflag.SliceValue (configuration
// files give lists).
func (l *listFlag) Append(v string) error { return l.Set(v) }

func (l *listFlag) Replace(vs []string) error {
	*l.p, l.changed = strings.Join(vs, ","), true
	return nil
}

func (l *listFlag) GetSlice() []string {
	if *l.p == "" {
		return nil
	}
	return strings.Split(*l.p, ",")
}
