package config

import "strings"

// ListFlag is a list flag (repeatable, comma-separated, like pflag's
// StringSlice) kept as one comma-joined string: how run and pdd take
// --kafka, a list on every role.
type ListFlag struct {
	p       *string
	changed bool
}

// NewList is a ListFlag over *p.
func NewList(p *string) *ListFlag { return &ListFlag{p: p} }

func (l *ListFlag) String() string { return *l.p }

func (l *ListFlag) Set(v string) error {
	if !l.changed || *l.p == "" {
		*l.p, l.changed = v, true
		return nil
	}
	*l.p += "," + v
	return nil
}

func (l *ListFlag) Type() string { return "strings" }

// Append, Replace and GetSlice make it a pflag.SliceValue (configuration
// files give lists).
func (l *ListFlag) Append(v string) error { return l.Set(v) }

func (l *ListFlag) Replace(vs []string) error {
	*l.p, l.changed = strings.Join(vs, ","), true
	return nil
}

func (l *ListFlag) GetSlice() []string {
	if *l.p == "" {
		return nil
	}
	return strings.Split(*l.p, ",")
}
