package main

import (
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/config"
)

// respell is config.Respell of c's flags: former flag names kept working.
func respell(c *cobra.Command, old map[string]string) { config.Respell(c.Flags(), old) }
