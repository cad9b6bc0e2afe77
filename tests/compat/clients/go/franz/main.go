// The compatibility client over twmb/franz-go (kgo, kadm). Operations: see compat.Parse.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"kmirror/compat/compat"
)

var codecs = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

func main() {
	cmd := compat.Parse(os.Args[1:])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(cmd.Bootstrap), kgo.ClientID("compat-franz")}
	switch cmd.Op {
	case "version":
		compat.Emit(map[string]string{"version": compat.ModuleVersion("github.com/twmb/franz-go")})
	case "create":
		cl := client(opts)
		answer, err := kadm.NewClient(cl).CreateTopics(ctx, int32(compat.Int(cmd.Args[0])), 1, nil, cmd.Topic)
		compat.Check(err, "CreateTopics")
		compat.Check(answer[cmd.Topic].Err, "CreateTopics "+cmd.Topic)
		compat.Emit(map[string]string{"created": cmd.Topic})
	case "produce":
		codec, ok := codecs[cmd.Args[0]]
		if !ok {
			compat.Fail(fmt.Errorf("unknown codec %s", cmd.Args[0]))
		}
		// Idempotence is kgo's default; acks=all is what it requires.
		cl := client(append(opts, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(codec)))
		count, prefix := compat.Int(cmd.Args[1]), cmd.Args[2]
		var records []*kgo.Record
		for i := 0; i < count; i++ {
			records = append(records, &kgo.Record{Topic: cmd.Topic,
				Key: []byte(compat.Key(prefix, i)), Value: []byte(compat.Value(prefix, i))})
		}
		compat.Check(cl.ProduceSync(ctx, records...).FirstErr(), "ProduceSync")
		acked := []compat.Record{}
		for _, r := range records {
			acked = append(acked, compat.Record{Partition: r.Partition, Offset: r.Offset,
				Key: string(r.Key), Value: string(r.Value)})
		}
		cl.Close()
		compat.Emit(map[string]any{"acked": acked})
	case "consume":
		consume(opts, cmd)
	case "committed":
		cl := client(opts)
		answer, err := kadm.NewClient(cl).FetchOffsets(ctx, cmd.Args[0])
		compat.Check(err, "FetchOffsets")
		compat.Check(answer.Error(), "FetchOffsets partitions")
		committed := map[int32]int64{}
		for p, o := range answer[cmd.Topic] {
			committed[p] = o.At
		}
		compat.Emit(map[string]any{"committed": committed})
	case "offsets":
		adm := kadm.NewClient(client(opts))
		out := compat.Offsets{Earliest: map[int32]int64{}, Latest: map[int32]int64{}}
		for _, side := range []struct {
			into map[int32]int64
			list func(context.Context, ...string) (kadm.ListedOffsets, error)
		}{{out.Earliest, adm.ListStartOffsets}, {out.Latest, adm.ListEndOffsets}} {
			listed, err := side.list(ctx, cmd.Topic)
			compat.Check(err, "ListOffsets")
			compat.Check(listed.Error(), "ListOffsets partitions")
			for p, o := range listed[cmd.Topic] {
				side.into[p] = o.Offset
			}
		}
		compat.Emit(out)
	}
}

func client(opts []kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(opts...)
	compat.Check(err, "client")
	return cl
}

// consume reads in a consumer group from the earliest offset (or the committed one), commits
// synchronously, and leaves the group.
func consume(opts []kgo.Opt, cmd compat.Command) {
	cl := client(append(opts, kgo.ConsumerGroup(cmd.Args[0]), kgo.ConsumeTopics(cmd.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit()))
	want := compat.Int(cmd.Args[1])
	ctx, cancel := context.WithTimeout(context.Background(), compat.ConsumeTimeout)
	defer cancel()
	records := []compat.Record{}
	for len(records) < want && ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		fetches.EachError(func(t string, p int32, err error) {
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "fetch %s/%d: %v\n", t, p, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			records = append(records, compat.Record{Partition: r.Partition, Offset: r.Offset,
				Key: string(r.Key), Value: string(r.Value)})
		})
	}
	commit, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	compat.Check(cl.CommitUncommittedOffsets(commit), "commit")
	cl.Close()
	compat.Emit(map[string]any{"records": records})
}
