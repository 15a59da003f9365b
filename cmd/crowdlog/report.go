package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/release/report"
)

func reportCmd() *cobra.Command {
	var o report.Flags
	c := &cobra.Command{
		Use:   "report --clickhouse HOST:PORT [--database crowdlog] [--user analyst --password-file FILE] [--out report.html]",
		Short: "Write one self-contained HTML page with plots of what was released",
		Long:  report.Help,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			if err := o.Complete(os.Getenv); err != nil {
				return err
			}
			return o.Run(cmd.Context(), os.Stdout)
		},
	}
	o.AddFlags(c.Flags())
	_ = c.MarkFlagRequired("clickhouse")
	return c
}
