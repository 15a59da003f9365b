package main

import (
	"fmt"

	"github.com/spf13/cobra"

	rndoptions "github.com/crowdlog/crowdlog/randomness/options"
)

// randomnessOpenCmd is `crowdlog randomness open-epoch`: the operator's
// action that opens a named epoch (randomness.Keys.OpenEpoch).
func randomnessOpenCmd() *cobra.Command {
	var o rndoptions.EpochOptions
	c := &cobra.Command{
		Use:   "open-epoch --keys DIR --epoch NAME",
		Short: "Open a named epoch at the randomness service: create its OPRF key so clients are served",
		Long:  rndoptions.OpenHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printLine(o.Open(logger()))
		},
	}
	o.AddFlags(c.Flags(), "epoch to open (1-64 letters, digits, '.', '_', '-')")
	_ = c.MarkFlagRequired("epoch")
	return c
}

// randomnessCloseCmd is `crowdlog randomness close-epoch`.
func randomnessCloseCmd() *cobra.Command {
	var o rndoptions.EpochOptions
	c := &cobra.Command{
		Use:   "close-epoch --keys DIR --epoch NAME",
		Short: "Close an epoch at the randomness service: refused from now on, its key destroyed after --key-grace",
		Long:  rndoptions.CloseHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger()
			return printLine(o.Close())
		},
	}
	o.AddFlags(c.Flags(), "epoch to close")
	_ = c.MarkFlagRequired("epoch")
	return c
}

// printLine prints line on stdout unless err is set, and returns err.
func printLine(line string, err error) error {
	if err == nil {
		fmt.Println(line)
	}
	return err
}
