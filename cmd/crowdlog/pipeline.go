package main

import (
	"errors"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/config"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
	"github.com/crowdlog/crowdlog/pipelines/runner"
)

// exitCode is an error with the process exit status main uses for it.
type exitCode struct {
	code int
	err  error
}

func (e exitCode) Error() string { return e.err.Error() }
func (e exitCode) Unwrap() error { return e.err }

// usageError marks err as invalid usage or configuration (exit status 2).
func usageError(err error) error { return exitCode{2, err} }

// applyConfig is config.Apply with its UsageError a usage error.
func applyConfig(cmd *cobra.Command, environ []string) error {
	err := config.Apply(cmd, environ)
	if errors.As(err, new(config.UsageError)) {
		return usageError(err)
	}
	return err
}

func pipelineCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "pipeline validate|show FILE",
		Short: "Check or print a pipeline file (what is collected and how it is released)",
		Long:  pipeline.Help,
	}
	c.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Check a pipeline file; exit 2 naming the field when it is invalid",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runner.ValidatePipeline(cmd.OutOrStdout(), args[0])
		},
	}, &cobra.Command{
		Use:   "show FILE",
		Short: "Print a pipeline file with every default filled in",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return runner.ShowPipeline(cmd.OutOrStdout(), args[0]) },
	})
	return c
}

// loadPipeline is runner.LoadPipeline (an invalid file exits 2).
func loadPipeline(path string) (*pipeline.Pipeline, error) { return runner.LoadPipeline(path) }

// pipelineFlag is runner.PipelineFlag.
func pipelineFlag(f *pflag.FlagSet, path string) (*pipeline.Pipeline, error) {
	return runner.PipelineFlag(f, path)
}
