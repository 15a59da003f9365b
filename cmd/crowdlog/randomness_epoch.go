package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	rndoptions "github.com/crowdlog/crowdlog/randomness/options"
)

// randomnessOpenCmd is `crowdlog randomness open-epoch`: the operator's
// action that opens a named epoch (randomness.Keys.OpenEpoch).
func randomnessOpenCmd() *cobra.Command {
	return randomnessEpochCmd("open-epoch --keys DIR --epoch NAME", "Open a named epoch at the randomness service: create its OPRF key so clients are served",
		rndoptions.OpenHelp, "epoch to open (1-64 letters, digits, '.', '_', '-')", func(o *rndoptions.EpochOptions) (string, error) { return o.Open(logger()) })
}

// randomnessCloseCmd is `crowdlog randomness close-epoch`.
func randomnessCloseCmd() *cobra.Command {
	return randomnessEpochCmd("close-epoch --keys DIR --epoch NAME", "Close an epoch at the randomness service: refused from now on, its key destroyed after --key-grace",
		rndoptions.CloseHelp, "epoch to close", func(o *rndoptions.EpochOptions) (string, error) { logger(); return o.Close() })
}

// randomnessEpochCmd is an operator's command on one epoch of the
// randomness service's keys directory: run's line is printed.
func randomnessEpochCmd(use, short, long, epochUsage string, run func(*rndoptions.EpochOptions) (string, error)) *cobra.Command {
	var o rndoptions.EpochOptions
	c := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return printLine(run(&o)) }}
	o.AddFlags(c.Flags(), epochUsage)
	_ = c.MarkFlagRequired("epoch")
	return c
}

// withPipelineDefaults calls apply with the defaults of the pipeline file
// path (pipeline.Pipeline.Defaults), unless path is empty.
func withPipelineDefaults(path string, apply func(d pipeline.Pipeline)) error {
	if path == "" {
		return nil
	}
	p, err := loadPipeline(path)
	if err != nil {
		return err
	}
	apply(p.Defaults())
	return nil
}

// printLine prints line on stdout unless err is set, and returns err.
func printLine(line string, err error) error {
	if err == nil {
		fmt.Println(line)
	}
	return err
}
