package main

import (
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
