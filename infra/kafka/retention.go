package kafka

import (
	"context"
	"fmt"
	"strconv"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// EnsureRetention makes every topic keep its records at least retention
// (Kafka's topic config retention.ms): a topic whose retention.ms is
// shorter (or unset, the broker's default) gets retention.ms raised to it
// (IncrementalAlterConfigs); a longer one is left as it is. Topics must
// exist (EnsureTopics). retention ≤ 0 does nothing. Errors name the topic
// and what failed. An epoch's reports must outlive its close (scheduled
// epochs: length + grace), or a replay that rebuilds the aggregator's
// state would miss them.
func EnsureRetention(ctx context.Context, addr string, retention time.Duration, topics ...string) error {
	if retention <= 0 || len(topics) == 0 {
		return nil
	}
	want := retention.Milliseconds()
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	req := &kafkago.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafkago.DescribeConfigRequestResource{
			ResourceType: kafkago.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{"retention.ms"}})
	}
	resp, err := cl.DescribeConfigs(ctx, req)
	if err != nil {
		return fmt.Errorf("kafka: describe the topics' retention at %s: %w", addr, err)
	}
	alter := &kafkago.IncrementalAlterConfigsRequest{}
	for _, r := range resp.Resources {
		if r.Error != nil {
			return fmt.Errorf("kafka: retention of topic %q: %w", r.ResourceName, r.Error)
		}
		have := int64(-2) // unset: the broker's default, whatever it is
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "retention.ms" && !e.IsDefault {
				if v, err := strconv.ParseInt(e.ConfigValue, 10, 64); err == nil {
					have = v
				}
			}
		}
		if have == -1 || have >= want { // -1: kept forever
			continue
		}
		alter.Resources = append(alter.Resources, kafkago.IncrementalAlterConfigsRequestResource{
			ResourceType: kafkago.ResourceTypeTopic, ResourceName: r.ResourceName,
			Configs: []kafkago.IncrementalAlterConfigsRequestConfig{{Name: "retention.ms", Value: strconv.FormatInt(want, 10),
				ConfigOperation: kafkago.ConfigOperationSet}}})
	}
	if len(alter.Resources) == 0 {
		return nil
	}
	aresp, err := cl.IncrementalAlterConfigs(ctx, alter)
	if err != nil {
		return fmt.Errorf("kafka: set the topics' retention.ms at %s: %w", addr, err)
	}
	for _, r := range aresp.Resources {
		if r.Error != nil {
			return fmt.Errorf("kafka: set retention.ms of topic %q: %w", r.ResourceName, r.Error)
		}
	}
	return nil
}

// Retention returns topic's retention.ms at addr as a duration: −1 for
// "kept forever", 0 when the topic has none of its own (the broker's
// default applies).
func Retention(ctx context.Context, addr, topic string) (time.Duration, error) {
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	resp, err := cl.DescribeConfigs(ctx, &kafkago.DescribeConfigsRequest{Resources: []kafkago.DescribeConfigRequestResource{{
		ResourceType: kafkago.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"retention.ms"}}}})
	if err != nil {
		return 0, fmt.Errorf("kafka: describe topic %q: %w", topic, err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			return 0, fmt.Errorf("kafka: describe topic %q: %w", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "retention.ms" && !e.IsDefault {
				v, err := strconv.ParseInt(e.ConfigValue, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("kafka: topic %q retention.ms %q: %w", topic, e.ConfigValue, err)
				}
				if v < 0 {
					return -1, nil
				}
				return time.Duration(v) * time.Millisecond, nil
			}
		}
	}
	return 0, nil
}
