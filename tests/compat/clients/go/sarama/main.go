// The compatibility client over IBM/sarama; -kafka-version sets config.Version (the protocol
// versions sarama picks). Operations: see compat.Parse.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"kmirror/compat/compat"
)

func main() {
	version := flag.String("kafka-version", "3.6.0", "config.Version")
	flag.Parse()
	cmd := compat.Parse(flag.Args())
	cfg := sarama.NewConfig()
	v, err := sarama.ParseKafkaVersion(*version)
	compat.Check(err, "kafka version")
	cfg.Version = v
	cfg.ClientID = "compat-sarama"
	addrs := []string{cmd.Bootstrap}
	switch cmd.Op {
	case "version":
		compat.Emit(map[string]string{"version": compat.ModuleVersion("github.com/IBM/sarama")})
	case "create":
		admin, err := sarama.NewClusterAdmin(addrs, cfg)
		compat.Check(err, "cluster admin")
		defer admin.Close()
		detail := &sarama.TopicDetail{NumPartitions: int32(compat.Int(cmd.Args[0])), ReplicationFactor: 1}
		compat.Check(admin.CreateTopic(cmd.Topic, detail, false), "CreateTopic")
		compat.Emit(map[string]string{"created": cmd.Topic})
	case "produce":
		produce(cfg, addrs, cmd)
	case "consume":
		consume(cfg, addrs, cmd)
	case "committed":
		admin, err := sarama.NewClusterAdmin(addrs, cfg)
		compat.Check(err, "cluster admin")
		defer admin.Close()
		client, err := sarama.NewClient(addrs, cfg)
		compat.Check(err, "client")
		defer client.Close()
		parts, err := client.Partitions(cmd.Topic)
		compat.Check(err, "partitions")
		answer, err := admin.ListConsumerGroupOffsets(cmd.Args[0], map[string][]int32{cmd.Topic: parts})
		compat.Check(err, "ListConsumerGroupOffsets")
		committed := map[int32]int64{}
		for p, block := range answer.Blocks[cmd.Topic] {
			if block.Err != sarama.ErrNoError {
				compat.Fail(fmt.Errorf("partition %d: %w", p, block.Err))
			}
			committed[p] = block.Offset
		}
		compat.Emit(map[string]any{"committed": committed})
	case "offsets":
		client, err := sarama.NewClient(addrs, cfg)
		compat.Check(err, "client")
		defer client.Close()
		parts, err := client.Partitions(cmd.Topic)
		compat.Check(err, "partitions")
		out := compat.Offsets{Earliest: map[int32]int64{}, Latest: map[int32]int64{}}
		for _, p := range parts {
			out.Earliest[p], err = client.GetOffset(cmd.Topic, p, sarama.OffsetOldest)
			compat.Check(err, "GetOffset oldest")
			out.Latest[p], err = client.GetOffset(cmd.Topic, p, sarama.OffsetNewest)
			compat.Check(err, "GetOffset newest")
		}
		compat.Emit(out)
	}
}

var codecs = map[string]sarama.CompressionCodec{
	"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD,
}

// produce sends the records with acks=all, idempotently, in one SendMessages.
func produce(cfg *sarama.Config, addrs []string, cmd compat.Command) {
	codec, ok := codecs[cmd.Args[0]]
	if !ok {
		compat.Fail(fmt.Errorf("unknown codec %s", cmd.Args[0]))
	}
	cfg.Producer.Compression = codec
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	producer, err := sarama.NewSyncProducer(addrs, cfg)
	compat.Check(err, "producer")
	count, prefix := compat.Int(cmd.Args[1]), cmd.Args[2]
	var msgs []*sarama.ProducerMessage
	for i := 0; i < count; i++ {
		msgs = append(msgs, &sarama.ProducerMessage{
			Topic: cmd.Topic,
			Key:   sarama.StringEncoder(compat.Key(prefix, i)),
			Value: sarama.StringEncoder(compat.Value(prefix, i)),
		})
	}
	compat.Check(producer.SendMessages(msgs), "SendMessages")
	compat.Check(producer.Close(), "close")
	acked := []compat.Record{}
	for i, m := range msgs {
		acked = append(acked, compat.Record{Partition: m.Partition, Offset: m.Offset,
			Key: compat.Key(prefix, i), Value: compat.Value(prefix, i)})
	}
	compat.Emit(map[string]any{"acked": acked})
}

// reader is a consumer group handler that keeps what it reads until it has enough.
type reader struct {
	mu      sync.Mutex
	records []compat.Record
	want    int
	done    context.CancelFunc
}

func (r *reader) Setup(sarama.ConsumerGroupSession) error { return nil }

// Cleanup commits what was marked, before the session ends.
func (r *reader) Cleanup(s sarama.ConsumerGroupSession) error {
	s.Commit()
	return nil
}

func (r *reader) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		r.mu.Lock()
		r.records = append(r.records, compat.Record{Partition: msg.Partition, Offset: msg.Offset,
			Key: string(msg.Key), Value: string(msg.Value)})
		enough := len(r.records) >= r.want
		r.mu.Unlock()
		s.MarkMessage(msg, "")
		if enough {
			r.done()
			return nil
		}
	}
	return nil
}

// consume reads in a consumer group from the earliest offset (or the committed one), commits
// synchronously, and leaves the group.
func consume(cfg *sarama.Config, addrs []string, cmd compat.Command) {
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Return.Errors = true
	group, err := sarama.NewConsumerGroup(addrs, cmd.Args[0], cfg)
	compat.Check(err, "consumer group")
	ctx, cancel := context.WithTimeout(context.Background(), compat.ConsumeTimeout)
	defer cancel()
	r := &reader{records: []compat.Record{}, want: compat.Int(cmd.Args[1]), done: cancel}
	go func() {
		for err := range group.Errors() {
			fmt.Fprintln(os.Stderr, "consumer group error:", err)
		}
	}()
	for ctx.Err() == nil {
		if err := group.Consume(ctx, []string{cmd.Topic}, r); err != nil && !errors.Is(err, context.Canceled) {
			compat.Check(err, "Consume")
		}
		if ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	compat.Check(group.Close(), "close group")
	r.mu.Lock()
	defer r.mu.Unlock()
	compat.Emit(map[string]any{"records": r.records})
}
