package kafka

import (
	"context"
	"fmt"
	"strconv"

	kafkago "github.com/segmentio/kafka-go"
)

// TopicMaxMessageBytes is the max.message.bytes, in bytes, `crowdlog
// topics` gives the Prio3 topics (protocol.Prio3UploadsTopic,
// protocol.Prio3SharesTopic): 2 MiB, twice Kafka's default of 1,048,588.
// A Prio3 upload is up to the largest onion size class (about 1 MiB; a
// leader share is ~16·L·b bytes, 655,204 bytes for an upload of L = 10,000
// keywords of b = 4 bits with both tokens) and a broker refuses a whole record batch above the limit
// ("Message Size Too Large"); relay b's writer of that topic batches up to
// 2,000,000 bytes (relays). Consumers of these topics need a fetch limit
// (kafka-go ReaderConfig.MaxBytes) of at least this much.
const TopicMaxMessageBytes = 2 << 20

// EnsureMaxMessageBytes makes every topic accept record batches of at
// least n bytes (Kafka's topic config max.message.bytes): a topic whose
// limit is lower (or unset: the broker's message.max.bytes, 1,048,588 by
// default) gets max.message.bytes raised to n (IncrementalAlterConfigs); a
// higher one is left as it is. Topics must exist (EnsureTopics). n ≤ 0
// does nothing. Errors name the topic and what failed; run it with the
// admin credential.
func EnsureMaxMessageBytes(ctx context.Context, addr string, n int, topics ...string) error {
	if n <= 0 || len(topics) == 0 {
		return nil
	}
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	alter := &kafkago.IncrementalAlterConfigsRequest{}
	for _, t := range topics {
		have, err := maxMessageBytes(ctx, cl, t)
		if err != nil {
			return err
		}
		if have >= n {
			continue
		}
		alter.Resources = append(alter.Resources, kafkago.IncrementalAlterConfigsRequestResource{
			ResourceType: kafkago.ResourceTypeTopic, ResourceName: t,
			Configs: []kafkago.IncrementalAlterConfigsRequestConfig{{Name: "max.message.bytes", Value: strconv.Itoa(n),
				ConfigOperation: kafkago.ConfigOperationSet}}})
	}
	if len(alter.Resources) == 0 {
		return nil
	}
	resp, err := cl.IncrementalAlterConfigs(ctx, alter)
	if err != nil {
		return fmt.Errorf("kafka: set the topics' max.message.bytes at %s: %w (is the broker running, and is this the admin credential?)", addr, err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			return fmt.Errorf("kafka: set max.message.bytes of topic %q: %w", r.ResourceName, r.Error)
		}
	}
	return nil
}

// MaxMessageBytes returns topic's max.message.bytes at addr: its own
// value, or the broker's default as the broker reports it (0 when the
// broker reports none).
func MaxMessageBytes(ctx context.Context, addr, topic string) (int, error) {
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	return maxMessageBytes(ctx, cl, topic)
}

func maxMessageBytes(ctx context.Context, cl *kafkago.Client, topic string) (int, error) {
	resp, err := cl.DescribeConfigs(ctx, &kafkago.DescribeConfigsRequest{Resources: []kafkago.DescribeConfigRequestResource{{
		ResourceType: kafkago.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"max.message.bytes"}}}})
	if err != nil {
		return 0, fmt.Errorf("kafka: describe topic %q: %w (is the broker running?)", topic, err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			return 0, fmt.Errorf("kafka: describe topic %q: %w (create it with crowdlog topics)", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "max.message.bytes" {
				v, err := strconv.Atoi(e.ConfigValue)
				if err != nil {
					return 0, fmt.Errorf("kafka: topic %q max.message.bytes %q: %w", topic, e.ConfigValue, err)
				}
				return v, nil
			}
		}
	}
	return 0, nil
}
