package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// versionCmd is `crowdlog version`: the same line as `crowdlog --version`,
// "crowdlog version MODULE-VERSION [REVISION] GO-VERSION"
// (infra/metrics.BuildInfo: the module version of a `go install`ed
// release, or "(devel)" with the VCS revision of a `go build` in a git
// checkout, "+modified" when the tree had uncommitted changes).
func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version, VCS revision and Go version this binary was built from",
		Long: `Print the module version, VCS revision and Go version this binary was built
from, as --version does: "crowdlog version VERSION [REVISION] GOVERSION".
VERSION is the module version (v1.2.3 for a tagged release installed with
go install, a pseudo-version or "(devel)" otherwise); REVISION is the first
12 hex digits of the git commit, "+modified" when the tree had uncommitted
changes, absent when the build recorded none (go run, -buildvcs=false).
The same values are exported as crowdlog_build_info on /metrics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "crowdlog version "+version())
			return err
		},
	}
}
