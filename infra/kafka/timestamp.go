package kafka

import (
	"context"
	"fmt"

	kafkago "github.com/segmentio/kafka-go"
)

// EnsureLogAppendTime sets Kafka's topic config
// message.timestamp.type=LogAppendTime on every topic
// (IncrementalAlterConfigs; topics must exist, EnsureTopics): the broker
// then stamps each record with its own append time, whatever the producer
// sent, so a replayed record cannot carry a chosen (or a zero or negative)
// timestamp. The aggregator checks signed control records against that
// time (protocol.SignedControl). A broker that refuses the config is an
// error naming the topic; kfake (the local broker) accepts and stores it
// but keeps producer timestamps, so there the aggregator's refusal of
// records without a timestamp is what holds.
func EnsureLogAppendTime(ctx context.Context, addr string, topics ...string) error {
	if len(topics) == 0 {
		return nil
	}
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	req := &kafkago.IncrementalAlterConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafkago.IncrementalAlterConfigsRequestResource{
			ResourceType: kafkago.ResourceTypeTopic, ResourceName: t,
			Configs: []kafkago.IncrementalAlterConfigsRequestConfig{{Name: "message.timestamp.type", Value: "LogAppendTime",
				ConfigOperation: kafkago.ConfigOperationSet}}})
	}
	resp, err := cl.IncrementalAlterConfigs(ctx, req)
	if err != nil {
		return fmt.Errorf("kafka: set message.timestamp.type at %s: %w (is the broker running, and is this the admin credential?)", addr, err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			return fmt.Errorf("kafka: set message.timestamp.type=LogAppendTime on topic %q: %w", r.ResourceName, r.Error)
		}
	}
	return nil
}

// TimestampType returns topic's message.timestamp.type at addr
// ("CreateTime" or "LogAppendTime"; the broker's default when the topic
// has none of its own).
func TimestampType(ctx context.Context, addr, topic string) (string, error) {
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	resp, err := cl.DescribeConfigs(ctx, &kafkago.DescribeConfigsRequest{Resources: []kafkago.DescribeConfigRequestResource{{
		ResourceType: kafkago.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"message.timestamp.type"}}}})
	if err != nil {
		return "", fmt.Errorf("kafka: describe topic %q: %w", topic, err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			return "", fmt.Errorf("kafka: describe topic %q: %w", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "message.timestamp.type" {
				return e.ConfigValue, nil
			}
		}
	}
	return "", nil
}
