package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/pipelines/clickhouseinit"
)

func clickhouseCmd() *cobra.Command {
	var o clickhouseinit.ServerOptions
	c := &cobra.Command{
		Use:   "clickhouse --dir DIR",
		Short: "Start a local ClickHouse server from a directory (for demos and one-machine use)",
		Long:  clickhouseinit.ServerHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			return o.Run(cmd.Context(), os.Stdout)
		},
	}
	o.AddFlags(c.Flags())
	c.AddCommand(clickhouseInitCmd())
	return c
}

func clickhouseInitCmd() *cobra.Command {
	var o clickhouseinit.InitOptions
	c := &cobra.Command{
		Use:   "init (--clickhouse HOST:PORT | --dir DIR) [--database crowdlog] [--analyst NAME] [--writer NAME] [--users-d DIR]",
		Short: "Create the release schema, the analyst database and a read-only analyst user",
		Long:  clickhouseinit.InitHelp,
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
	respell(c, map[string]string{"addr": "clickhouse"})
	return c
}
