package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/crowdlog/crowdlog/infra/profile"
	"github.com/crowdlog/crowdlog/pipelines/runner"
)

func runCmd() *cobra.Command {
	c, _ := newRunCmd()
	return c
}

// newRunCmd returns the run command and the Config its flags fill.
func newRunCmd() (*cobra.Command, *runner.Config) {
	var o runner.Options
	c := &cobra.Command{
		Use:   "run --input LOG --app query --policy ft-u --k 5 [--export OUT.tsv]",
		Short: "Run every stage on one machine (or against given services) and release a histogram",
		Long:  runner.RunHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLocalServices(cmd, o.Kafka, o.ClickHouse); err != nil {
				return err
			}
			if err := o.Complete(cmd.Flags()); err != nil {
				return err
			}
			o.Logger = logger()
			if !o.NoProgress && term.IsTerminal(int(os.Stderr.Fd())) {
				o.Progress = os.Stderr
			}
			stopProfile, err := profile.StartCPU()
			if err != nil {
				return err
			}
			sum, err := runner.Run(cmd.Context(), o.Config)
			stopProfile()
			if sum != nil {
				sum.Print(os.Stdout)
			}
			if err == nil && o.Export != "" {
				fmt.Printf("  export            %s\n", o.Export)
			}
			return err
		},
	}
	o.AddFlags(c.Flags())
	c.MarkFlagRequired("input")
	return c, &o.Config
}
