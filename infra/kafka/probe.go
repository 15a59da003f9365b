package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// Operation is one thing a Kafka principal may try on a resource, named as
// Kafka's ACL operations name them (Kafka's authorization reference,
// "Operations and Resources on Protocols"): Read, Write, Describe, Create,
// Alter or Delete on a topic; Read, Describe or Delete on a consumer
// group; Alter on the cluster (creating ACLs). Try runs it; the
// permission-matrix attack and an operator checking a principal's rights
// both use it.
type Operation struct {
	// Op is "Read", "Write", "Describe", "Create", "Alter" or "Delete".
	Op string
	// Resource is "topic", "group" or "cluster".
	Resource string
	// Name is the topic or group ("" for the cluster).
	Name string
}

func (o Operation) String() string {
	if o.Resource == "cluster" {
		return o.Op + " cluster"
	}
	return o.Op + " " + o.Resource + " " + o.Name
}

// Try runs op at the broker addr as the Auth of ctx and returns nil when
// the broker let it through, else the broker's (or the connection's)
// error. What each operation does, and what counts as let through:
//
//   - Read topic: fetch partitions 0 and 1 from offset 0 (records or an
//     empty answer; the topic needs 2 partitions);
//   - Write topic: produce one record (one attempt);
//   - Describe topic: metadata of the topic without an error for it;
//   - Create topic: create it again with 2 partitions (the answer "topic
//     already exists" passed the authorization check);
//   - Alter topic: add a partition with validate-only set (nothing changes);
//   - Delete topic: delete it (destructive: the caller recreates it);
//   - Read group: commit offset 0 of topic's partition 0 outside any
//     generation (an unknown member or generation passed the group check;
//     a refused topic does not count against the group);
//   - Describe group: find the group's coordinator;
//   - Delete group: delete it (an unknown or non-empty group passed);
//   - Alter cluster: create an ACL for a made-up principal.
//
// Each step is bounded by ctx and by 10 s.
func Try(ctx context.Context, addr string, op Operation) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	switch op.Resource + " " + op.Op {
	case "topic Read":
		_, err := fetchAll(ctx, addr, op.Name, 2)
		return err
	case "topic Write":
		return produce(ctx, addr, op.Name, kafkago.Message{Value: []byte(`{"op":"close-epoch","app":"query","epoch":"e1"}`)})
	case "topic Describe":
		resp, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{op.Name}})
		if err != nil {
			return err
		}
		for _, t := range resp.Topics {
			if t.Name == op.Name {
				return t.Error
			}
		}
		return fmt.Errorf("kafka: metadata has no topic %q", op.Name)
	case "topic Create":
		resp, err := cl.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{Topic: op.Name, NumPartitions: 2, ReplicationFactor: 1}}})
		if err != nil {
			return err
		}
		if err := resp.Errors[op.Name]; err != nil && !errors.Is(err, kafkago.TopicAlreadyExists) {
			return err
		}
		return nil
	case "topic Alter":
		resp, err := cl.CreatePartitions(ctx, &kafkago.CreatePartitionsRequest{Topics: []kafkago.TopicPartitionsConfig{{Name: op.Name, Count: 3}}, ValidateOnly: true})
		if err != nil {
			return err
		}
		return resp.Errors[op.Name]
	case "topic Delete":
		resp, err := cl.DeleteTopics(ctx, &kafkago.DeleteTopicsRequest{Topics: []string{op.Name}})
		if err != nil {
			return err
		}
		return resp.Errors[op.Name]
	case "group Read":
		resp, err := cl.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{GroupID: op.Name, GenerationID: -1,
			Topics: map[string][]kafkago.OffsetCommit{"reports": {{Partition: 0, Offset: 0}}}})
		if err != nil {
			return err
		}
		for _, ps := range resp.Topics {
			for _, p := range ps {
				if errors.Is(p.Error, kafkago.GroupAuthorizationFailed) {
					return p.Error
				}
			}
		}
		return nil
	case "group Describe":
		resp, err := cl.FindCoordinator(ctx, &kafkago.FindCoordinatorRequest{Key: op.Name, KeyType: kafkago.CoordinatorKeyTypeConsumer})
		if err == nil {
			err = resp.Error
		}
		return err
	case "group Delete":
		resp, err := cl.DeleteGroups(ctx, &kafkago.DeleteGroupsRequest{GroupIDs: []string{op.Name}})
		if err != nil {
			return err
		}
		if err := resp.Errors[op.Name]; err != nil && !errors.Is(err, kafkago.GroupIdNotFound) && !errors.Is(err, kafkago.NonEmptyGroup) {
			return err
		}
		return nil
	case "cluster Alter":
		return ApplyACLs(ctx, addr, map[Role]string{RoleRelease: "anyone"})
	}
	return fmt.Errorf("kafka: no such operation %v", op)
}

// fetchAll reads every record of topic's partitions from offset 0 as the
// Auth of ctx (kafka-go Client.Fetch, bounded by ctx): the count and the
// first error.
func fetchAll(ctx context.Context, addr, topic string, partitions int) (int, error) {
	cl := clientCtx(ctx, addr)
	defer closeTransport(cl)
	n := 0
	for p := range partitions {
		resp, err := cl.Fetch(ctx, &kafkago.FetchRequest{Topic: topic, Partition: p, Offset: 0, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond})
		if err == nil {
			err = resp.Error
		}
		if err != nil {
			return n, err
		}
		for {
			_, err := resp.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// produce writes msgs to topic as the Auth of ctx (one attempt, bounded by
// a 10 s deadline).
func produce(ctx context.Context, addr, topic string, msgs ...kafkago.Message) error {
	w := NewWriterAuth(AuthFrom(ctx), addr, topic)
	w.MaxAttempts = 1
	defer CloseWriter(w)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return w.WriteMessages(wctx, msgs...)
}
