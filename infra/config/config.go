// Package config gives the flags of a cobra command their values from the
// environment, secret files and a YAML file (koanf), under the same names as
// the flags (docs/operations.md, Configuration).
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// The configuration layer (docs/operations.md, Configuration). Every flag
// of the running subcommand that is not on the command line takes its
// value from, in this order:
//
//  1. CROWDLOG_<NAME> (the flag name in upper case, '-' as '_'), or
//     CROWDLOG_<NAME>_FILE, the path of a file holding the value (one
//     trailing newline trimmed; Docker and Kubernetes secrets);
//  2. the YAML file of --config (else $CROWDLOG_CONFIG): a key per flag
//     name, a list for a slice flag, and a section per subcommand
//     (`release: {clickhouse: ch:9000}`, nested for `aggregate: {close-epoch:
//     {...}}`) whose keys win over the outer ones for that command;
//  3. the flag's default.
//
// A value is given to the flag as if it was on the command line
// (pflag.FlagSet.Set, or SliceValue.Replace for a YAML list), so it is
// parsed and checked the same way and the flag counts as given (Changed:
// required flags are satisfied, and --pipeline refuses a pipeline flag set
// in the environment or the file as it does on the command line).

const (
	// EnvPrefix begins the name of every environment variable of a flag.
	EnvPrefix = "CROWDLOG_"
	// Flag is the name of the flag that gives the YAML file.
	Flag = "config"
	// Env is the environment variable that gives the YAML file when --config
	// is not given.
	Env = EnvPrefix + "CONFIG"
)

// UsageError is an error of a key or value of the environment or the file:
// invalid configuration (exit status 2).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

func usageError(err error) error { return UsageError{err} }

// Help is the line every command's usage ends with.
const Help = `Every flag can also be set as CROWDLOG_<FLAG> (environment, CROWDLOG_<FLAG>_FILE
for secrets) or in --config FILE; flags win over the environment, which wins
over the file.`

// Long is the Configuration paragraph of the root command's help.
const Long = `Configuration: every flag can also be set as CROWDLOG_<FLAG> (environment)
or in --config FILE (YAML); flags win over the environment, which wins over
the file. <FLAG> is the flag's name in upper case with '-' as '_'
(--budget-epsilon: CROWDLOG_BUDGET_EPSILON). CROWDLOG_<FLAG>_FILE=PATH reads
the value from a file (trailing newline trimmed; Docker and Kubernetes
secrets), so e.g. NATS URLs with credentials stay off argv. The file (else
$CROWDLOG_CONFIG) has flag names as keys (clickhouse: ch:9000, kafka:
[a:9092, b:9092]) and optional sections per subcommand (release: {database:
prod}) that win over the top-level keys for that command. An unknown key or
a value the flag refuses exits 2.`

// NotConfigurable are flags that neither the environment nor the file set.
var NotConfigurable = map[string]bool{"help": true, "version": true, Flag: true}

// EnvName is the environment variable of flag name (CROWDLOG_NAME, '-' as '_').
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Apply gives every flag of cmd (parsed already) that was not on the
// command line its value from environ (os.Environ form) or the --config
// file. It first refuses a secret flag (MarkSecret) or a URL with a
// password given on the command line. Errors about a key or value are
// UsageError; a config file that cannot be read is not.
func Apply(cmd *cobra.Command, environ []string) error {
	flags := cmd.Flags()
	if err := checkCommandLine(flags); err != nil {
		return err
	}
	k := koanf.New(".")
	l := layers{flags: flags, source: map[string]string{}, fromFile: map[string]string{}}
	if err := l.loadFile(k, cmd, environ); err != nil {
		return err
	}
	if err := l.loadEnv(k, environ); err != nil {
		return err
	}
	// The command line, over both. posflag loads what was given there and,
	// for the other flags, the default where no other layer set a value:
	// k is the command's whole configuration.
	if err := k.Load(posflag.Provider(flags, ".", k), nil); err != nil {
		return err
	}
	return l.setFlags(k)
}

// layers records, while the file and the environment load, where each
// flag's value comes from.
type layers struct {
	flags    *pflag.FlagSet
	source   map[string]string // flag name -> where its value comes from
	fromFile map[string]string // flag name -> its _FILE variable
}

// configurable reports whether the environment or the file may set name.
func (l *layers) configurable(name string) bool {
	return l.flags.Lookup(name) != nil && !NotConfigurable[name]
}

// loadFile loads the file (lowest layer) into k as cmd sees it: the
// top-level keys, then those of its section and of its subcommand's
// section, ... .
func (l *layers) loadFile(k *koanf.Koanf, cmd *cobra.Command, environ []string) error {
	path := ""
	if f := l.flags.Lookup(Flag); f != nil && f.Changed {
		path = f.Value.String()
	} else {
		path = lookupEnv(environ, Env)
	}
	if path == "" {
		return nil
	}
	fk := koanf.New(".")
	if err := fk.Load(file.Provider(path), yamlText{}); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("config file: %w", err)
		}
		return usageError(fmt.Errorf("config file %s: %w", path, err))
	}
	raw := fk.Raw()
	if err := checkSection(raw, cmd.Root(), "", path); err != nil {
		return err
	}
	sec, prefix := raw, ""
	for _, name := range commandPath(cmd) {
		for key, v := range sec {
			if _, isMap := v.(map[string]any); !isMap && l.configurable(key) {
				if err := k.Set(key, v); err != nil {
					return err
				}
				l.source[key] = fmt.Sprintf("config file %s: key %s%s", path, prefix, key)
			}
		}
		if name == "" {
			break
		}
		next, _ := sec[name].(map[string]any)
		sec, prefix = next, prefix+name+"."
	}
	return nil
}

// loadEnv loads the environment into k, over the file: CROWDLOG_<NAME>,
// or the contents of the file CROWDLOG_<NAME>_FILE names.
func (l *layers) loadEnv(k *koanf.Koanf, environ []string) error {
	var envErr error
	keep := func(err error) {
		if envErr == nil {
			envErr = err
		}
	}
	err := k.Load(env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(key, value string) (string, any) {
			name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(key, EnvPrefix), "_", "-"))
			if key == EnvName(name) && l.configurable(name) {
				if _, both := l.fromFile[name]; both {
					keep(usageError(fmt.Errorf("%s and %s are both set: give --%s one way", key, key+"_FILE", name)))
				}
				l.source[name] = key
				return name, value
			}
			base, ok := strings.CutSuffix(name, "-file")
			if !ok || key != EnvName(base)+"_FILE" || !l.configurable(base) {
				return "", nil // another tool's variable, or another command's flag
			}
			if l.flags.Lookup(base).Changed {
				return "", nil // the command line wins: the file is not read
			}
			if l.source[base] == EnvName(base) {
				keep(usageError(fmt.Errorf("%s and %s are both set: give --%s one way", EnvName(base), key, base)))
			}
			v, err := readSecret(value)
			if err != nil {
				keep(fmt.Errorf("%s: %w", key, err))
			}
			l.fromFile[base] = key
			l.source[base] = key + "=" + value
			return base, v
		},
	}), nil)
	if err == nil {
		err = envErr
	}
	return err
}

// readSecret is the contents of the file path less one trailing newline.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	v, _ := strings.CutSuffix(string(b), "\n")
	v, _ = strings.CutSuffix(v, "\r")
	return v, err
}

// setFlags gives each flag not on the command line that the environment
// or the file set its value from k.
func (l *layers) setFlags(k *koanf.Koanf) error {
	var names []string
	l.flags.VisitAll(func(f *pflag.Flag) {
		if !f.Changed && l.source[f.Name] != "" {
			names = append(names, f.Name)
		}
	})
	for _, name := range names {
		if err := setFlag(l.flags, name, k.Get(name), l.fromFile[name] != ""); err != nil {
			return usageError(fmt.Errorf("%s: %w", l.source[name], err))
		}
	}
	return nil
}

// setFlag gives flag name the value v from the environment or the file:
// FlagSet.Set of its text, or the items of a YAML list with the flag's
// SliceValue.Replace. secret: do not repeat the value in an error.
func setFlag(flags *pflag.FlagSet, name string, v any, secret bool) error {
	f := flags.Lookup(name)
	if list, ok := v.([]any); ok {
		sv, ok := f.Value.(pflag.SliceValue)
		if !ok {
			return fmt.Errorf("a list, but --%s takes one value", name)
		}
		items := make([]string, len(list))
		for i, it := range list {
			s, err := scalar(it)
			if err != nil {
				return fmt.Errorf("item %d: %w", i+1, err)
			}
			items[i] = s
		}
		if err := sv.Replace(items); err != nil {
			return fmt.Errorf("invalid value %q for --%s: %w", items, name, err)
		}
		f.Changed = true
		return nil
	}
	s, err := scalar(v)
	if err != nil {
		return err
	}
	if err := flags.Set(name, s); err != nil {
		if secret {
			return fmt.Errorf("not a valid %s for --%s (value not shown)", f.Value.Type(), name)
		}
		return err // pflag's: invalid argument "x" for "--name" flag: ...
	}
	return nil
}

// scalar is the text of one value as a flag would be given it on the
// command line (the file's values are text already, yamlText).
func scalar(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", fmt.Errorf("a %T, not a value a flag takes", v)
	}
}

// yamlText is a koanf.Parser of YAML that keeps every scalar as the text
// written in the file (koanf's parsers/yaml decodes them: a date becomes a
// time.Time, 1.0 becomes 1), so a flag parses exactly what a person wrote,
// as if it was on the command line. Mappings and sequences stay
// map[string]any and []any; null is "".
type yamlText struct{}

func (yamlText) Unmarshal(b []byte) (map[string]any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return map[string]any{}, nil // an empty file
	}
	v, err := yamlValue(doc.Content[0])
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("the file must be a mapping of flag names to values")
	}
	return m, nil
}

func (yamlText) Marshal(m map[string]any) ([]byte, error) { return yaml.Marshal(m) }

func yamlValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.AliasNode:
		return yamlValue(n.Alias)
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "", nil
		}
		return n.Value, nil
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, err := yamlValue(c)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if _, dup := out[key]; dup {
				return nil, fmt.Errorf("line %d: key %s given twice", n.Content[i].Line, key)
			}
			v, err := yamlValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			out[key] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("line %d: unsupported YAML", n.Line)
}

// commandPath is the subcommand names from the root to cmd, then "".
func commandPath(cmd *cobra.Command) []string {
	path := []string{""}
	for c := cmd; c.HasParent(); c = c.Parent() {
		path = append([]string{c.Name()}, path...)
	}
	return path
}

// checkSection refuses the keys of a config file section (of command c,
// at prefix) that name neither a flag of c or of a command below it, nor
// (holding a mapping) a subcommand of c.
func checkSection(sec map[string]any, c *cobra.Command, prefix, path string) error {
	keys := make([]string, 0, len(sec))
	for key := range sec {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if key == Flag {
			return usageError(fmt.Errorf("config file %s: key %s%s: give the file with --config or %s, not in a file", path, prefix, key, Env))
		}
		if m, ok := sec[key].(map[string]any); ok {
			sub := subcommand(c, key)
			if sub == nil {
				return usageError(fmt.Errorf("config file %s: unknown key %s%s: a section must name a subcommand of %q", path, prefix, key, c.CommandPath()))
			}
			if err := checkSection(m, sub, prefix+key+".", path); err != nil {
				return err
			}
			continue
		}
		if !hasFlag(c, key) {
			return usageError(fmt.Errorf("config file %s: unknown key %s%s: no flag --%s in %q or its subcommands", path, prefix, key, key, c.CommandPath()))
		}
	}
	return nil
}

func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// hasFlag reports whether c or a command below it has flag name (its own
// or inherited).
func hasFlag(c *cobra.Command, name string) bool {
	if NotConfigurable[name] {
		return false
	}
	if c.Flags().Lookup(name) != nil {
		return true
	}
	for p := c; p != nil; p = p.Parent() {
		if p.PersistentFlags().Lookup(name) != nil {
			return true
		}
	}
	for _, s := range c.Commands() {
		if hasFlag(s, name) {
			return true
		}
	}
	return false
}

// lookupEnv is os.LookupEnv over environ.
func lookupEnv(environ []string, key string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
