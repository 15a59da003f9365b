package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/crowdlog/crowdlog/infra/kafka"
	"github.com/crowdlog/crowdlog/protocol"
)

func topicsCmd() *cobra.Command {
	var brokers []string
	var partitions int
	var retention time.Duration
	var pipelineFile string
	var acls []string
	c := &cobra.Command{
		Use:   "topics --kafka ADDR[,ADDR...] [--pipeline FILE | --partitions N --retention D]",
		Short: "Create the Kafka topics a pipeline needs (reports, decrypted) with its partitions and retention",
		Long: `topics creates the topics "reports" and "decrypted" on a Kafka cluster with
--partitions partitions (replication min(3, brokers)) and makes them keep
their records at least --retention (retention.ms; a shorter one is raised,
a longer one kept). With --pipeline FILE both come from the file
(topics.partitions, topics.retention; a scheduled pipeline's retention is
at least epoch.length + epoch.grace, by default twice that), so a rebuilt
aggregator can replay an epoch's reports until its keys are gone.
Existing topics keep their partition count. "reports" gets
message.timestamp.type=LogAppendTime: the broker stamps every record, so a
replayed epoch control record cannot choose its timestamp. Run it once per
cluster before the roles start; it is idempotent.

With --acl ROLE=USER (repeated or comma-separated; roles relay, aggregator,
scheduler, operator, coordinator, release, auditor) it also creates the
Kafka ACLs of the role table (docs/operations.md, Kafka ACLs) for each
role's SASL user: operator is the credential of the epoch jobs
(open-epoch, close-epoch: Write on "reports" only); scheduler adds that
Write to an aggregator that runs an epoch schedule (give it the
aggregator's user, only then). Give this command the admin credential
(--kafka-sasl-…, a super user).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pipelineFile != "" {
				p, err := loadPipeline(pipelineFile)
				if err != nil {
					return err
				}
				d := p.Defaults()
				if !cmd.Flags().Changed("partitions") {
					partitions = d.Topics.Partitions
				}
				if !cmd.Flags().Changed("retention") {
					retention = d.Topics.Retention
				}
			}
			if partitions < 1 || partitions > 1024 {
				return usageError(fmt.Errorf("--partitions %d: want 1..1024", partitions))
			}
			principals := map[kafka.Role]string{}
			for _, a := range acls {
				role, user, ok := strings.Cut(a, "=")
				if !ok || user == "" || !slices.Contains(kafka.Roles, kafka.Role(role)) {
					return usageError(fmt.Errorf("--acl %q: want ROLE=USER with ROLE one of %v", a, kafka.Roles))
				}
				principals[kafka.Role(role)] = user
			}
			ctx := cmd.Context()
			if err := kafka.EnsureTopics(ctx, brokers[0], partitions, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
				return err
			}
			if err := kafka.EnsureRetention(ctx, brokers[0], retention, protocol.ReportsTopic, protocol.DecryptedTopic); err != nil {
				return err
			}
			if err := kafka.EnsureLogAppendTime(ctx, brokers[0], protocol.ReportsTopic); err != nil {
				return err
			}
			for _, t := range []string{protocol.ReportsTopic, protocol.DecryptedTopic} {
				n, err := kafka.Partitions(ctx, brokers[0], t)
				if err != nil {
					return err
				}
				r, err := kafka.Retention(ctx, brokers[0], t)
				if err != nil {
					return err
				}
				ret := "the broker's default"
				switch {
				case r < 0:
					ret = "kept forever"
				case r > 0:
					ret = r.String()
				}
				fmt.Fprintf(cmd.OutOrStdout(), "topic %s: %d partitions, retention %s\n", t, n, ret)
			}
			if len(principals) == 0 {
				return nil
			}
			if err := kafka.ApplyACLs(ctx, brokers[0], principals); err != nil {
				return err
			}
			for _, e := range kafka.ACLEntries(principals) {
				fmt.Fprintf(cmd.OutOrStdout(), "acl %s: allow %s on %s %s (%s)\n", e.Principal, e.Operation, e.ResourceType, e.ResourceName, e.ResourcePatternType)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringSliceVar(&brokers, "kafka", []string{defaultKafka}, "Kafka bootstrap brokers, comma-separated host:port list")
	f.IntVar(&partitions, "partitions", 8, "partitions of each topic when created")
	f.DurationVar(&retention, "retention", 0, "least time the topics keep their records (0 = leave the broker's default)")
	f.StringSliceVar(&acls, "acl", nil, "ROLE=USER: create the Kafka ACLs of ROLE (relay, aggregator, scheduler, operator, coordinator, release, auditor) for SASL user USER; repeatable")
	f.StringVarP(&pipelineFile, "pipeline", "f", "", "pipeline file: topics.partitions and topics.retention from it unless given as flags")
	return c
}
