package kafka

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/crowdlog/crowdlog/protocol"
)

// DefaultBroker is the Kafka bootstrap broker a role connects to unless
// --kafka says otherwise.
const DefaultBroker = "127.0.0.1:9092"

// TopicsHelp is the long help of `crowdlog topics`.
const TopicsHelp = `topics creates the topics "reports", "decrypted", "prio3-uploads",
"prio3-shares" and PDD groups mode's "vectors" and "group-sums" on a Kafka cluster with --partitions partitions
(replication min(3, brokers)) and makes them keep
their records at least --retention (retention.ms; a shorter one is raised,
a longer one kept). With --pipeline FILE both come from the file
(topics.partitions, topics.retention; a scheduled pipeline's retention is
at least epoch.length + epoch.grace, by default twice that), so a rebuilt
aggregator can replay an epoch's reports until its keys are gone.
Existing topics keep their partition count. "reports" gets
message.timestamp.type=LogAppendTime: the broker stamps every record, so a
replayed epoch control record cannot choose its timestamp. "prio3-uploads"
and "prio3-shares" get max.message.bytes=2097152 (2 MiB; a higher one is
kept): a Prio3 upload is up to about 1 MiB, over Kafka's default limit.
Run it once per cluster before the roles start; it is idempotent.

With --acl ROLE=USER (repeated or comma-separated; roles relay, aggregator,
scheduler, operator, coordinator, release, auditor, prio3-leader) it also
creates the Kafka ACLs of the role table (docs/operations.md, Kafka ACLs)
for each role's SASL user: operator is the credential of the epoch jobs
(open-epoch, close-epoch: Write on "reports" only); scheduler adds that
Write to an aggregator that runs an epoch schedule (give it the
aggregator's user, only then). Give this command the admin credential
(--kafka-sasl-…, a super user).`

// TopicsOptions are the flags of `crowdlog topics`, the admin step that
// creates the topics "reports", "decrypted", "prio3-uploads" and
// "prio3-shares" and the role ACLs.
type TopicsOptions struct {
	Brokers    []string
	Partitions int           // of each topic when created, 1..1024
	Retention  time.Duration // least retention.ms; 0 leaves the broker's default
	// ACLs are ROLE=USER pairs: the ACLs of ROLE (one of Roles) for SASL
	// user USER.
	ACLs []string
	// PipelineFile, when set, is the pipeline file whose topics settings
	// apply unless given as flags (ApplyPipeline).
	PipelineFile string
}

// TopicsConfig is what EnsureSetup applies.
type TopicsConfig struct {
	Broker     string // the first bootstrap broker
	Partitions int
	Retention  time.Duration
	Principals map[Role]string // role → SASL user
}

// NewTopicsOptions returns the defaults: the local broker, 8 partitions.
func NewTopicsOptions() *TopicsOptions {
	return &TopicsOptions{Brokers: []string{DefaultBroker}, Partitions: 8}
}

// AddFlags adds the step's flags to f, with o's values as defaults.
func (o *TopicsOptions) AddFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&o.Brokers, "kafka", o.Brokers, "Kafka bootstrap brokers, comma-separated host:port list")
	f.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of each topic when created")
	f.DurationVar(&o.Retention, "retention", o.Retention, "least time the topics keep their records (0 = leave the broker's default)")
	f.StringSliceVar(&o.ACLs, "acl", o.ACLs, "ROLE=USER: create the Kafka ACLs of ROLE (relay, aggregator, scheduler, operator, coordinator, release, auditor, prio3-leader) for SASL user USER; repeatable")
	f.StringVarP(&o.PipelineFile, "pipeline", "f", "", "pipeline file: topics.partitions and topics.retention from it unless given as flags")
}

// ApplyPipeline takes a pipeline's topics settings for the flags f does
// not have changed.
func (o *TopicsOptions) ApplyPipeline(f *pflag.FlagSet, partitions int, retention time.Duration) {
	if !f.Changed("partitions") {
		o.Partitions = partitions
	}
	if !f.Changed("retention") {
		o.Retention = retention
	}
}

// Validate errors on a partition count outside 1..1024 or an --acl that
// is not ROLE=USER with a known role.
func (o *TopicsOptions) Validate() error {
	_, err := o.Config()
	return err
}

// Config validates o and returns its TopicsConfig.
func (o *TopicsOptions) Config() (TopicsConfig, error) {
	if o.Partitions < 1 || o.Partitions > 1024 {
		return TopicsConfig{}, fmt.Errorf("--partitions %d: want 1..1024", o.Partitions)
	}
	c := TopicsConfig{Broker: o.Brokers[0], Partitions: o.Partitions, Retention: o.Retention, Principals: map[Role]string{}}
	for _, a := range o.ACLs {
		role, user, ok := strings.Cut(a, "=")
		if !ok || user == "" || !slices.Contains(Roles, Role(role)) {
			return TopicsConfig{}, fmt.Errorf("--acl %q: want ROLE=USER with ROLE one of %v", a, Roles)
		}
		c.Principals[Role(role)] = user
	}
	return c, nil
}

// EnsureSetup creates the topics with their partitions, retention, the
// LogAppendTime of "reports" and the TopicMaxMessageBytes of the Prio3
// topics (EnsureTopics, EnsureRetention, EnsureLogAppendTime,
// EnsureMaxMessageBytes), then the ACLs of c.Principals (ApplyACLs), and
// writes each topic's partitions and retention (and the Prio3 topics'
// max.message.bytes) and each ACL entry to w.
func (c TopicsConfig) EnsureSetup(ctx context.Context, w io.Writer) error {
	topics := []string{protocol.ReportsTopic, protocol.DecryptedTopic, protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic,
		protocol.VectorsTopic, protocol.GroupSumsTopic}
	if err := EnsureTopics(ctx, c.Broker, c.Partitions, topics...); err != nil {
		return err
	}
	if err := EnsureRetention(ctx, c.Broker, c.Retention, topics...); err != nil {
		return err
	}
	if err := EnsureLogAppendTime(ctx, c.Broker, protocol.ReportsTopic); err != nil {
		return err
	}
	if err := EnsureMaxMessageBytes(ctx, c.Broker, TopicMaxMessageBytes, protocol.Prio3UploadsTopic, protocol.Prio3SharesTopic); err != nil {
		return err
	}
	for _, t := range topics {
		if err := c.reportTopic(ctx, w, t); err != nil {
			return err
		}
	}
	if len(c.Principals) == 0 {
		return nil
	}
	if err := ApplyACLs(ctx, c.Broker, c.Principals); err != nil {
		return err
	}
	for _, e := range ACLEntries(c.Principals) {
		fmt.Fprintf(w, "acl %s: allow %s on %s %s (%s)\n", e.Principal, e.Operation, e.ResourceType, e.ResourceName, e.ResourcePatternType)
	}
	return nil
}

// reportTopic writes topic t's partition count and retention to w.
func (c TopicsConfig) reportTopic(ctx context.Context, w io.Writer, t string) error {
	n, err := Partitions(ctx, c.Broker, t)
	if err != nil {
		return err
	}
	r, err := Retention(ctx, c.Broker, t)
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
	if t != protocol.Prio3UploadsTopic && t != protocol.Prio3SharesTopic {
		fmt.Fprintf(w, "topic %s: %d partitions, retention %s\n", t, n, ret)
		return nil
	}
	mb, err := MaxMessageBytes(ctx, c.Broker, t)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "topic %s: %d partitions, retention %s, max.message.bytes %d\n", t, n, ret, mb)
	return nil
}
