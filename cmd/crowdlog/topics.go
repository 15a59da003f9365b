package main

import (
	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/pipelines/pipeline"
)

func topicsCmd() *cobra.Command {
	o := kafka.NewTopicsOptions()
	c := &cobra.Command{
		Use:   "topics --kafka ADDR[,ADDR...] [--pipeline FILE | --partitions N --retention D]",
		Short: "Create the Kafka topics a pipeline needs (reports, decrypted) with its partitions and retention",
		Long:  kafka.TopicsHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := withPipelineDefaults(o.PipelineFile, func(d pipeline.Pipeline) { o.ApplyPipeline(cmd.Flags(), d.Topics.Partitions, d.Topics.Retention) }); err != nil {
				return err
			}
			cfg, err := o.Config()
			if err != nil {
				return usageError(err)
			}
			return cfg.EnsureSetup(cmd.Context(), cmd.OutOrStdout())
		},
	}
	o.AddFlags(c.Flags())
	return c
}
