package aol

import "github.com/spf13/pflag"

// AddTimeFormatFlag adds --time-format (Options.TimeFormat) to f, filling
// *p: the flag of every command that reads a search log.
func AddTimeFormatFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "time-format", "", "QueryTime format: empty detects 2006-01-02 15:04:05, RFC 3339, Unix seconds or yymmddHHMMSS from the first good line; or aol, rfc3339, unix, excite, or a Go time layout (e.g. \"02/Jan/2006:15:04:05\")")
}
