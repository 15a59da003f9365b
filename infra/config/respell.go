package config

import "github.com/spf13/pflag"

// Respell gives the flags of f one spelling per concept across roles
// (--keys for a keys directory, --clickhouse for a ClickHouse address):
// old maps a former name to the flag's name, and the former name keeps
// working on the command line as the same flag (pflag normalization), so
// scripts written for it do not break. Help shows the one spelling.
func Respell(f *pflag.FlagSet, old map[string]string) {
	prev := f.GetNormalizeFunc()
	f.SetNormalizeFunc(func(fs *pflag.FlagSet, name string) pflag.NormalizedName {
		if n, ok := old[name]; ok {
			name = n
		}
		return prev(fs, name)
	})
}
