package config

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/pflag"
)

// SecretAnnotation marks a flag whose value is a secret (a password, a
// key): MarkSecret sets it, and Apply refuses such a flag given on the
// command line, where every user of the host reads it (ps,
// /proc/PID/cmdline) and the shell keeps it in its history. Its value
// comes from CROWDLOG_<FLAG>_FILE=PATH (a mounted secret), CROWDLOG_<FLAG>
// or the --config file instead.
const SecretAnnotation = "crowdlog-secret"

// MarkSecret marks the flags names of f as secrets (SecretAnnotation) and
// ends their usage with how to pass them. It panics on a name f lacks (a
// programming error).
func MarkSecret(f *pflag.FlagSet, names ...string) {
	for _, name := range names {
		fl := f.Lookup(name)
		if fl == nil {
			panic("config.MarkSecret: no flag --" + name)
		}
		if err := f.SetAnnotation(name, SecretAnnotation, []string{"true"}); err != nil {
			panic(err)
		}
		fl.Usage += "; a secret, refused on the command line: " + SecretUsage(name)
	}
}

// SecretUsage is how to pass the secret flag name: "set
// CROWDLOG_NAME_FILE=PATH (a file, mode 0600) or CROWDLOG_NAME".
func SecretUsage(name string) string {
	return "set " + EnvName(name) + "_FILE=PATH (a file, mode 0600) or " + EnvName(name)
}

// IsSecret reports whether fl is marked with MarkSecret.
func IsSecret(fl *pflag.Flag) bool {
	return len(fl.Annotations[SecretAnnotation]) > 0
}

// checkCommandLine refuses, as a UsageError, a secret flag given on the
// command line and any flag whose command-line value holds a URL with a
// password (scheme://user:PASSWORD@host, e.g. a NATS URL), naming the
// flag and how to pass it, never the value.
func checkCommandLine(flags *pflag.FlagSet) error {
	var err error
	flags.Visit(func(fl *pflag.Flag) {
		if err != nil {
			return
		}
		switch {
		case IsSecret(fl):
			err = usageError(fmt.Errorf("--%s takes a secret and is refused on the command line, where every user of the host reads it (ps, /proc) and the shell history keeps it: %s", fl.Name, SecretUsage(fl.Name)))
		case hasURLPassword(fl.Value.String()):
			err = usageError(fmt.Errorf("--%s holds a URL with a password, refused on the command line, where every user of the host reads it (ps, /proc) and the shell history keeps it: %s", fl.Name, SecretUsage(fl.Name)))
		}
	})
	return err
}

// hasURLPassword reports whether v, or an item of v as a comma-separated
// list or a pflag slice ("[a,b]"), is a URL whose user info has a
// password.
func hasURLPassword(v string) bool {
	v = strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if !strings.Contains(item, "://") || !strings.Contains(item, "@") {
			continue
		}
		u, err := url.Parse(item)
		if err != nil {
			// unparseable: look for user:password@ after the scheme
			_, rest, _ := strings.Cut(item, "://")
			userinfo, _, found := strings.Cut(rest, "@")
			if found && strings.Contains(userinfo, ":") {
				return true
			}
			continue
		}
		if u.User != nil {
			if _, set := u.User.Password(); set {
				return true
			}
		}
	}
	return false
}
