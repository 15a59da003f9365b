package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/infra/clickhouse"
	infrakafka "github.com/crowdlog/crowdlog/infra/kafka"
)

// addKafkaAuthFlags adds the Kafka TLS and SASL flags (infra/kafka
// AddAuthFlags) to c and every subcommand of c that has a --kafka flag.
func addKafkaAuthFlags(c *cobra.Command) { addWhereFlag(c, "kafka", infrakafka.AddAuthFlags) }

// addClickHouseLoginFlags adds the ClickHouse login flags (infra/clickhouse
// AddLoginFlags) to c and every subcommand of c that has a --clickhouse flag.
func addClickHouseLoginFlags(c *cobra.Command) {
	addWhereFlag(c, "clickhouse", clickhouse.AddLoginFlags)
}

// addWhereFlag calls add on the flags of c and, recursively, of each
// subcommand that has the flag named flag.
func addWhereFlag(c *cobra.Command, flag string, add func(*pflag.FlagSet)) {
	for _, sub := range c.Commands() {
		addWhereFlag(sub, flag, add)
	}
	if c.Flags().Lookup(flag) != nil {
		add(c.Flags())
	}
}

// applyKafkaAuth loads cmd's Kafka credential flags (after the
// configuration layer set them) into cmd's context
// (infra/kafka.WithAuthFlags). Errors are usage errors naming the flag.
func applyKafkaAuth(cmd *cobra.Command) error {
	ctx, err := infrakafka.WithAuthFlags(cmd.Context(), cmd.Flags(), cmd.CommandPath())
	cmd.SetContext(ctx)
	return usageErrorOrNil(err)
}

// applyClickHouseLogin loads cmd's ClickHouse login flags into cmd's
// context (infra/clickhouse.WithLoginFlags). Errors are usage errors
// naming the flag to fix.
func applyClickHouseLogin(cmd *cobra.Command) error {
	ctx, err := clickhouse.WithLoginFlags(cmd.Context(), cmd.Flags())
	cmd.SetContext(ctx)
	return usageErrorOrNil(err)
}

// usageErrorOrNil is usageError(err), nil when err is.
func usageErrorOrNil(err error) error {
	if err != nil {
		return usageError(err)
	}
	return nil
}

// requireWriterLogin is clickhouse.RequireWriter as a usage error.
func requireWriterLogin(cmd *cobra.Command, what string) error {
	return usageErrorOrNil(clickhouse.RequireWriter(cmd.Context(), what))
}

// checkLocalServices refuses credentials meant for a remote service when
// `run` or `pdd` is about to start the local one instead (an empty
// --kafka or --clickhouse; kafka.CheckLocal, clickhouse.CheckLocal).
func checkLocalServices(cmd *cobra.Command, kafkaAddr, clickhouseAddr string) error {
	err := infrakafka.CheckLocal(cmd.Context(), kafkaAddr)
	if err == nil {
		err = clickhouse.CheckLocal(cmd.Context(), clickhouseAddr)
	}
	return usageErrorOrNil(err)
}
