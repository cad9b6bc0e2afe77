// The compatibility client over segmentio/kafka-go (Writer, Reader, Client). It has no
// idempotent producer. Operations: see compat.Parse.
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"kmirror/compat/compat"
)

var codecs = map[string]compress.Compression{
	"none": 0, "gzip": compress.Gzip, "snappy": compress.Snappy, "lz4": compress.Lz4, "zstd": compress.Zstd,
}

func main() {
	cmd := compat.Parse(os.Args[1:])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(cmd.Bootstrap), Timeout: 30 * time.Second}
	switch cmd.Op {
	case "version":
		compat.Emit(map[string]string{"version": compat.ModuleVersion("github.com/segmentio/kafka-go")})
	case "create":
		answer, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
			Topic: cmd.Topic, NumPartitions: compat.Int(cmd.Args[0]), ReplicationFactor: 1}}})
		compat.Check(err, "CreateTopics")
		compat.Check(answer.Errors[cmd.Topic], "CreateTopics "+cmd.Topic)
		compat.Emit(map[string]string{"created": cmd.Topic})
	case "produce":
		produce(ctx, cmd)
	case "consume":
		consume(cmd)
	case "committed":
		parts := partitions(ctx, client, cmd.Topic)
		answer, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: cmd.Args[0],
			Topics: map[string][]int{cmd.Topic: parts}})
		compat.Check(err, "OffsetFetch")
		compat.Check(answer.Error, "OffsetFetch group")
		committed := map[int32]int64{}
		for _, p := range answer.Topics[cmd.Topic] {
			compat.Check(p.Error, fmt.Sprintf("OffsetFetch partition %d", p.Partition))
			committed[int32(p.Partition)] = p.CommittedOffset
		}
		compat.Emit(map[string]any{"committed": committed})
	case "offsets":
		var asks []kafka.OffsetRequest
		for _, p := range partitions(ctx, client, cmd.Topic) {
			asks = append(asks, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
		}
		answer, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
			Topics: map[string][]kafka.OffsetRequest{cmd.Topic: asks}})
		compat.Check(err, "ListOffsets")
		out := compat.Offsets{Earliest: map[int32]int64{}, Latest: map[int32]int64{}}
		for _, p := range answer.Topics[cmd.Topic] {
			compat.Check(p.Error, fmt.Sprintf("ListOffsets partition %d", p.Partition))
			out.Earliest[int32(p.Partition)] = p.FirstOffset
			out.Latest[int32(p.Partition)] = p.LastOffset
		}
		compat.Emit(out)
	}
}

// partitions lists the topic's partition ids from Metadata.
func partitions(ctx context.Context, client *kafka.Client, topic string) []int {
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	compat.Check(err, "Metadata")
	var ids []int
	for _, t := range meta.Topics {
		compat.Check(t.Error, "Metadata "+topic)
		for _, p := range t.Partitions {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

// produce writes the records with a Writer (acks=all), taking their offsets from its
// completion reports.
func produce(ctx context.Context, cmd compat.Command) {
	codec, ok := codecs[cmd.Args[0]]
	if !ok {
		compat.Fail(fmt.Errorf("unknown codec %s", cmd.Args[0]))
	}
	var mu sync.Mutex
	acked := []compat.Record{}
	w := &kafka.Writer{Addr: kafka.TCP(cmd.Bootstrap), Topic: cmd.Topic, RequiredAcks: kafka.RequireAll,
		Compression: codec, Balancer: &kafka.Hash{}, BatchTimeout: 10 * time.Millisecond,
		Completion: func(messages []kafka.Message, err error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range messages {
				if err == nil {
					acked = append(acked, compat.Record{Partition: int32(m.Partition), Offset: m.Offset,
						Key: string(m.Key), Value: string(m.Value)})
				}
			}
		}}
	count, prefix := compat.Int(cmd.Args[1]), cmd.Args[2]
	var msgs []kafka.Message
	for i := 0; i < count; i++ {
		msgs = append(msgs, kafka.Message{Key: []byte(compat.Key(prefix, i)), Value: []byte(compat.Value(prefix, i))})
	}
	compat.Check(w.WriteMessages(ctx, msgs...), "WriteMessages")
	compat.Check(w.Close(), "close writer")
	mu.Lock()
	defer mu.Unlock()
	compat.Emit(map[string]any{"acked": acked})
}

// consume reads in a consumer group with a Reader from the earliest offset (or the committed
// one), commits synchronously what it read, and leaves the group.
func consume(cmd compat.Command) {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{cmd.Bootstrap}, GroupID: cmd.Args[0],
		Topic: cmd.Topic, StartOffset: kafka.FirstOffset, MaxWait: 500 * time.Millisecond,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...interface{}) {
			fmt.Fprintf(os.Stderr, msg+"\n", args...)
		})})
	want := compat.Int(cmd.Args[1])
	ctx, cancel := context.WithTimeout(context.Background(), compat.ConsumeTimeout)
	defer cancel()
	var read []kafka.Message
	records := []compat.Record{}
	for len(records) < want {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "FetchMessage:", err)
			break
		}
		read = append(read, m)
		records = append(records, compat.Record{Partition: int32(m.Partition), Offset: m.Offset,
			Key: string(m.Key), Value: string(m.Value)})
	}
	commit, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	compat.Check(r.CommitMessages(commit, read...), "CommitMessages")
	compat.Check(r.Close(), "close reader")
	compat.Emit(map[string]any{"records": records})
}
