/*
 * Golden samples of the KIP-1279 wire formats, made and read by the KIP authors' prototype.
 *
 * The reference is the prototype's own generated message classes and record helpers, used as they
 * are (the jars in the prototype's lib/ folder; docs/wire.md says where it comes from). One sample value
 * per mirror RPC body and record is defined below, with every field away from its default, and
 * the program works in either direction:
 *
 *   write DIR   encodes every sample at version 0 with the prototype and writes the raw body
 *               bytes (no request or response header) to DIR/<Name>.bin, and the prototype's JSON
 *               rendering of the same value to DIR/<Name>.json for people to read.
 *   check DIR   decodes every DIR/<Name>.bin written by another implementation with the prototype,
 *               requires that all bytes are consumed and that the value equals the sample, and
 *               prints one line per sample: OK, MISMATCH, MISSING or UNDECODABLE. Exit status 1
 *               if any line is not OK.
 *
 * Besides the messages, two samples pin the MIRROR_PID_RESET control record down to the byte: its
 * record key (ControlRecordKey) and a whole control batch made by the prototype's batch helper
 * (MirrorPidResetBatch). When a batch differs, check also shows how the prototype reads it.
 *
 * Run from the repository root with Java 17; no build step (source-file mode). The interop tests
 * (tests/interop/prototype.rs) run it both ways; by hand, with PROTOTYPE the prototype's folder:
 *   java -cp "$(ls "$PROTOTYPE"/lib/*.jar | tr '\n' ':')" \
 *       tests/interop/prototype/Golden.java write /tmp/golden-proto
 *   java -cp ... tests/interop/prototype/Golden.java check DIR
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.function.BiFunction;
import java.util.function.Function;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.*;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.common.protocol.Readable;
import org.apache.kafka.common.protocol.types.Struct;
import org.apache.kafka.common.record.ControlRecordType;
import org.apache.kafka.common.record.ControlRecordUtils;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;

public class Golden {
    /** Every message is sampled at version 0, the only version the prototype defines. */
    static final short V0 = 0;

    static final Uuid TOPIC_ID_1 = new Uuid(0x0102030405060708L, 0x090a0b0c0d0e0f10L);
    static final Uuid TOPIC_ID_2 = new Uuid(0x1112131415161718L, 0x191a1b1c1d1e1f20L);

    // Arguments of the MIRROR_PID_RESET control batch.
    static final long BATCH_BASE_OFFSET = 42L;
    static final long BATCH_TIMESTAMP = 1700000000000L;
    static final int BATCH_LEADER_EPOCH = 5;

    static final ObjectMapper JSON = new ObjectMapper();
    static final HexFormat HEX = HexFormat.of();

    /** One golden sample: the prototype's bytes, a readable form, and a check of foreign bytes. */
    interface Sample {
        String name();

        byte[] encode();

        JsonNode describe();

        /** Null when the bytes are accepted, else the report; throws when they cannot be decoded. */
        String check(byte[] bytes);
    }

    /** A message sample; accepted when the prototype decodes the bytes to an equal value. */
    record MessageSample<T extends Message>(
            String name, T value, BiFunction<Readable, Short, T> decoder, BiFunction<T, Short, JsonNode> json)
            implements Sample {
        public byte[] encode() {
            return MessageUtil.byteBufferToArray(MessageUtil.toByteBufferAccessor(value, V0).buffer());
        }

        public JsonNode describe() {
            return json.apply(value, V0);
        }

        public String check(byte[] bytes) {
            ByteBufferAccessor in = new ByteBufferAccessor(ByteBuffer.wrap(bytes));
            T got = decoder.apply(in, V0);
            // The decoder stops at the end of its schema, so extra bytes would otherwise go unseen.
            if (in.remaining() != 0) {
                throw new IllegalStateException(in.remaining() + " of " + bytes.length
                        + " bytes left after decoding " + got);
            }
            return value.equals(got) ? null : "MISMATCH " + name + ": expected " + value + " got " + got;
        }
    }

    /** A sample compared byte for byte; reader shows how the prototype parses a given encoding. */
    record BytesSample(String name, byte[] bytes, Function<byte[], JsonNode> reader) implements Sample {
        public byte[] encode() {
            return bytes.clone();
        }

        public JsonNode describe() {
            return reader.apply(bytes);
        }

        public String check(byte[] other) {
            if (Arrays.equals(bytes, other)) {
                return null;
            }
            String report = "MISMATCH " + name + ": expected " + HEX.formatHex(bytes) + " got " + HEX.formatHex(other);
            try {
                return report + "\n  the prototype reads it as: " + reader.apply(other);
            } catch (Exception e) {
                return report + "\n  the prototype cannot read it: " + e;
            }
        }
    }

    static <T extends Message> Sample message(
            String name, T value, BiFunction<Readable, Short, T> decoder, BiFunction<T, Short, JsonNode> json) {
        return new MessageSample<>(name, value, decoder, json);
    }

    static List<Sample> samples() {
        return List.of(
                message("CreateClusterMirrorRequest", createClusterMirrorRequest(),
                        CreateClusterMirrorRequestData::new, CreateClusterMirrorRequestDataJsonConverter::write),
                message("CreateClusterMirrorResponse", createClusterMirrorResponse(),
                        CreateClusterMirrorResponseData::new, CreateClusterMirrorResponseDataJsonConverter::write),
                message("StartMirrorTopicsRequest", startMirrorTopicsRequest(),
                        StartMirrorTopicsRequestData::new, StartMirrorTopicsRequestDataJsonConverter::write),
                message("StartMirrorTopicsResponse", startMirrorTopicsResponse(),
                        StartMirrorTopicsResponseData::new, StartMirrorTopicsResponseDataJsonConverter::write),
                message("StopMirrorTopicsRequest", stopMirrorTopicsRequest(),
                        StopMirrorTopicsRequestData::new, StopMirrorTopicsRequestDataJsonConverter::write),
                message("StopMirrorTopicsResponse", stopMirrorTopicsResponse(),
                        StopMirrorTopicsResponseData::new, StopMirrorTopicsResponseDataJsonConverter::write),
                message("ListClusterMirrorsRequest", listClusterMirrorsRequest(),
                        ListClusterMirrorsRequestData::new, ListClusterMirrorsRequestDataJsonConverter::write),
                message("ListClusterMirrorsResponse", listClusterMirrorsResponse(),
                        ListClusterMirrorsResponseData::new, ListClusterMirrorsResponseDataJsonConverter::write),
                message("DescribeClusterMirrorsRequest", describeClusterMirrorsRequest(),
                        DescribeClusterMirrorsRequestData::new, DescribeClusterMirrorsRequestDataJsonConverter::write),
                message("DescribeClusterMirrorsResponse", describeClusterMirrorsResponse(),
                        DescribeClusterMirrorsResponseData::new, DescribeClusterMirrorsResponseDataJsonConverter::write),
                message("ReadMirrorStatesRequest", readMirrorStatesRequest(),
                        ReadMirrorStatesRequestData::new, ReadMirrorStatesRequestDataJsonConverter::write),
                message("ReadMirrorStatesResponse", readMirrorStatesResponse(),
                        ReadMirrorStatesResponseData::new, ReadMirrorStatesResponseDataJsonConverter::write),
                message("WriteMirrorStatesRequest", writeMirrorStatesRequest(),
                        WriteMirrorStatesRequestData::new, WriteMirrorStatesRequestDataJsonConverter::write),
                message("WriteMirrorStatesResponse", writeMirrorStatesResponse(),
                        WriteMirrorStatesResponseData::new, WriteMirrorStatesResponseDataJsonConverter::write),
                message("PauseMirrorTopicsRequest", pauseMirrorTopicsRequest(),
                        PauseMirrorTopicsRequestData::new, PauseMirrorTopicsRequestDataJsonConverter::write),
                message("PauseMirrorTopicsResponse", pauseMirrorTopicsResponse(),
                        PauseMirrorTopicsResponseData::new, PauseMirrorTopicsResponseDataJsonConverter::write),
                message("ResumeMirrorTopicsRequest", resumeMirrorTopicsRequest(),
                        ResumeMirrorTopicsRequestData::new, ResumeMirrorTopicsRequestDataJsonConverter::write),
                message("ResumeMirrorTopicsResponse", resumeMirrorTopicsResponse(),
                        ResumeMirrorTopicsResponseData::new, ResumeMirrorTopicsResponseDataJsonConverter::write),
                message("DeleteClusterMirrorRequest", deleteClusterMirrorRequest(),
                        DeleteClusterMirrorRequestData::new, DeleteClusterMirrorRequestDataJsonConverter::write),
                message("DeleteClusterMirrorResponse", deleteClusterMirrorResponse(),
                        DeleteClusterMirrorResponseData::new, DeleteClusterMirrorResponseDataJsonConverter::write),
                message("BumpLeaderEpochsRequest", bumpLeaderEpochsRequest(),
                        BumpLeaderEpochsRequestData::new, BumpLeaderEpochsRequestDataJsonConverter::write),
                message("BumpLeaderEpochsResponse", bumpLeaderEpochsResponse(),
                        BumpLeaderEpochsResponseData::new, BumpLeaderEpochsResponseDataJsonConverter::write),
                message("MirrorPidResetRecord", mirrorPidResetRecord(),
                        MirrorPidResetRecord::new, MirrorPidResetRecordJsonConverter::write),
                new BytesSample("ControlRecordKey", controlRecordKey(), Golden::readControlRecordKey),
                new BytesSample("MirrorPidResetBatch", mirrorPidResetBatch(), Golden::readBatch));
    }

    // ---- The samples. Partition indexes start at 1 because 0 is the default; where a list has
    // two elements, a nullable string is set in the first and null in the second.

    static CreateClusterMirrorRequestData createClusterMirrorRequest() {
        var config = new CreateClusterMirrorRequestData.ClusterMirrorConfigCollection();
        config.add(new CreateClusterMirrorRequestData.ClusterMirrorConfig()
                .setName("bootstrap.servers").setValue("src:9092"));
        config.add(new CreateClusterMirrorRequestData.ClusterMirrorConfig()
                .setName("client.id").setValue(null));
        return new CreateClusterMirrorRequestData().setMirrorName("m1").setConfig(config);
    }

    static CreateClusterMirrorResponseData createClusterMirrorResponse() {
        return new CreateClusterMirrorResponseData()
                .setThrottleTimeMs(10).setErrorCode((short) 2).setErrorMessage("e1");
    }

    static StartMirrorTopicsRequestData startMirrorTopicsRequest() {
        var topics = new StartMirrorTopicsRequestData.TopicMetadataCollection();
        topics.add(new StartMirrorTopicsRequestData.TopicMetadata()
                .setTopicId(TOPIC_ID_1).setTopicName("orders").setNumPartitions(3));
        topics.add(new StartMirrorTopicsRequestData.TopicMetadata()
                .setTopicId(TOPIC_ID_2).setTopicName("payments").setNumPartitions(4));
        return new StartMirrorTopicsRequestData()
                .setMirrorName("m1")
                .setTopics(topics)
                .setIncludePatterns(List.of("ord.*", "pay.*")) // tag 0
                .setExcludePatterns(List.of("tmp.*")) // tag 1
                .setStateValidationOffset(5L);
    }

    static StartMirrorTopicsResponseData startMirrorTopicsResponse() {
        return new StartMirrorTopicsResponseData()
                .setThrottleTimeMs(11).setErrorCode((short) 2).setErrorMessage("e1")
                .setTopics(List.of(
                        new StartMirrorTopicsResponseData.TopicResult()
                                .setName("orders").setErrorCode((short) 3).setErrorMessage("e2"),
                        new StartMirrorTopicsResponseData.TopicResult()
                                .setName("payments").setErrorCode((short) 4).setErrorMessage(null)));
    }

    static StopMirrorTopicsRequestData stopMirrorTopicsRequest() {
        var topics = new StopMirrorTopicsRequestData.TopicMetadataCollection();
        topics.add(new StopMirrorTopicsRequestData.TopicMetadata().setTopicName("orders"));
        topics.add(new StopMirrorTopicsRequestData.TopicMetadata().setTopicName("payments"));
        return new StopMirrorTopicsRequestData()
                .setMirrorName("m1")
                .setTopics(topics)
                .setPatterns(List.of("ord.*", "pay.*")) // tag 0
                .setStateValidationOffset(6L);
    }

    static StopMirrorTopicsResponseData stopMirrorTopicsResponse() {
        return new StopMirrorTopicsResponseData()
                .setThrottleTimeMs(12).setErrorCode((short) 2).setErrorMessage("e1")
                .setTopics(List.of(
                        new StopMirrorTopicsResponseData.TopicResult()
                                .setName("orders").setErrorCode((short) 3).setErrorMessage("e2"),
                        new StopMirrorTopicsResponseData.TopicResult()
                                .setName("payments").setErrorCode((short) 4).setErrorMessage(null)));
    }

    static ListClusterMirrorsRequestData listClusterMirrorsRequest() {
        return new ListClusterMirrorsRequestData().setIncludeTopicNames(true);
    }

    static ListClusterMirrorsResponseData listClusterMirrorsResponse() {
        return new ListClusterMirrorsResponseData()
                .setThrottleTimeMs(13).setErrorCode((short) 2).setErrorMessage("e1")
                .setMirrors(List.of(
                        new ListClusterMirrorsResponseData.ListedMirror()
                                .setMirrorName("m1").setSourceBootstrap("src:9092")
                                .setSourceClusterId("src-cluster-1").setTopicCount(2)
                                .setTopicNames(List.of("orders", "payments")),
                        new ListClusterMirrorsResponseData.ListedMirror()
                                .setMirrorName("m2").setSourceBootstrap("src2:9092")
                                .setSourceClusterId("src-cluster-2").setTopicCount(1)
                                .setTopicNames(List.of("audit"))));
    }

    static DescribeClusterMirrorsRequestData describeClusterMirrorsRequest() {
        return new DescribeClusterMirrorsRequestData()
                .setMirrorNames(List.of("m1", "m2"))
                .setIncludeAuthorizedOperations(true)
                .setClusterId("dst-cluster-1") // tag 0
                .setLastMirrorEpochLookups(List.of( // tag 1
                        new DescribeClusterMirrorsRequestData.LastMirrorEpochLookup()
                                .setTopicId(TOPIC_ID_1).setPartitions(List.of(1, 2)),
                        new DescribeClusterMirrorsRequestData.LastMirrorEpochLookup()
                                .setTopicId(TOPIC_ID_2).setPartitions(List.of(3))));
    }

    static DescribeClusterMirrorsResponseData describeClusterMirrorsResponse() {
        var m1 = new DescribeClusterMirrorsResponseData.DescribedMirror()
                .setErrorCode((short) 3).setMirrorName("m1").setAuthorizedOperations(4)
                .setTopics(List.of(new DescribeClusterMirrorsResponseData.TopicPartitions()
                        .setTopicName("orders")
                        .setPartitions(List.of(
                                new DescribeClusterMirrorsResponseData.PartitionDetail()
                                        .setPartitionIndex(1).setSourceOffset(100L).setDestinationOffset(90L)
                                        .setLag(10L).setStateValue("MIRRORING").setRetryAttempt((short) 5)
                                        .setErrorMessage("e2"),
                                new DescribeClusterMirrorsResponseData.PartitionDetail()
                                        .setPartitionIndex(2).setSourceOffset(200L).setDestinationOffset(150L)
                                        .setLag(50L).setStateValue("FAILED").setRetryAttempt((short) 6)
                                        .setErrorMessage(null)))));
        var m2 = new DescribeClusterMirrorsResponseData.DescribedMirror()
                .setErrorCode((short) 7).setMirrorName("m2").setAuthorizedOperations(8)
                .setTopics(List.of(new DescribeClusterMirrorsResponseData.TopicPartitions()
                        .setTopicName("audit")
                        .setPartitions(List.of(new DescribeClusterMirrorsResponseData.PartitionDetail()
                                .setPartitionIndex(3).setSourceOffset(300L).setDestinationOffset(299L)
                                .setLag(1L).setStateValue("PAUSED").setRetryAttempt((short) 9)
                                .setErrorMessage("e3")))));
        return new DescribeClusterMirrorsResponseData()
                .setThrottleTimeMs(14).setErrorCode((short) 2).setErrorMessage("e1")
                .setMirrors(List.of(m1, m2))
                .setLookupResults(List.of( // tag 0
                        new DescribeClusterMirrorsResponseData.LookupResult()
                                .setTopicId(TOPIC_ID_1)
                                .setPartitions(List.of(
                                        new DescribeClusterMirrorsResponseData.PartitionResult()
                                                .setPartitionIndex(1).setLastMirrorEpoch(11),
                                        new DescribeClusterMirrorsResponseData.PartitionResult()
                                                .setPartitionIndex(2).setLastMirrorEpoch(12))),
                        new DescribeClusterMirrorsResponseData.LookupResult()
                                .setTopicId(TOPIC_ID_2)
                                .setPartitions(List.of(new DescribeClusterMirrorsResponseData.PartitionResult()
                                        .setPartitionIndex(3).setLastMirrorEpoch(13)))));
    }

    static ReadMirrorStatesRequestData readMirrorStatesRequest() {
        return new ReadMirrorStatesRequestData()
                .setMirrorName("m1")
                .setTopics(List.of(
                        new ReadMirrorStatesRequestData.TopicMetadata()
                                .setName("orders")
                                .setPartitions(List.of(
                                        new ReadMirrorStatesRequestData.PartitionData().setPartitionIndex(1),
                                        new ReadMirrorStatesRequestData.PartitionData().setPartitionIndex(2))),
                        new ReadMirrorStatesRequestData.TopicMetadata()
                                .setName("payments")
                                .setPartitions(List.of(
                                        new ReadMirrorStatesRequestData.PartitionData().setPartitionIndex(3)))));
    }

    static ReadMirrorStatesResponseData readMirrorStatesResponse() {
        return new ReadMirrorStatesResponseData()
                .setThrottleTimeMs(15).setErrorCode((short) 2).setErrorMessage("e1")
                .setTopics(List.of(new ReadMirrorStatesResponseData.TopicResult()
                        .setName("orders")
                        .setPartitions(List.of(
                                new ReadMirrorStatesResponseData.PartitionResult()
                                        .setPartitionIndex(1).setLastMirrorEpoch(4).setState((byte) 2)
                                        .setErrorCode((short) 5).setPreviousState((byte) 3)
                                        .setRetryAttempt((short) 6).setErrorMessage("e2"),
                                new ReadMirrorStatesResponseData.PartitionResult()
                                        .setPartitionIndex(2).setLastMirrorEpoch(7).setState((byte) 4)
                                        .setErrorCode((short) 8).setPreviousState((byte) 1)
                                        .setRetryAttempt((short) 9).setErrorMessage(null)))));
    }

    static WriteMirrorStatesRequestData writeMirrorStatesRequest() {
        return new WriteMirrorStatesRequestData()
                .setMirrorName("m1")
                .setTopics(List.of(new WriteMirrorStatesRequestData.TopicMetadata()
                        .setName("orders")
                        .setPartitions(List.of(
                                new WriteMirrorStatesRequestData.PartitionData()
                                        .setPartitionIndex(1).setLastMirrorEpoch(4).setState((byte) 2),
                                new WriteMirrorStatesRequestData.PartitionData()
                                        .setPartitionIndex(2).setLastMirrorEpoch(5).setState((byte) 3)))))
                .setStoppedTopics(List.of("old1", "old2"));
    }

    static WriteMirrorStatesResponseData writeMirrorStatesResponse() {
        return new WriteMirrorStatesResponseData()
                .setThrottleTimeMs(16).setErrorCode((short) 2).setErrorMessage("e1")
                .setTopics(List.of(new WriteMirrorStatesResponseData.TopicResult()
                        .setName("orders")
                        .setPartitions(List.of(
                                new WriteMirrorStatesResponseData.PartitionResult()
                                        .setPartitionIndex(1).setErrorCode((short) 3).setErrorMessage("e2"),
                                new WriteMirrorStatesResponseData.PartitionResult()
                                        .setPartitionIndex(2).setErrorCode((short) 4).setErrorMessage(null)))));
    }

    static PauseMirrorTopicsRequestData pauseMirrorTopicsRequest() {
        var topics = new PauseMirrorTopicsRequestData.TopicMetadataCollection();
        topics.add(new PauseMirrorTopicsRequestData.TopicMetadata().setTopicName("orders"));
        topics.add(new PauseMirrorTopicsRequestData.TopicMetadata().setTopicName("payments"));
        return new PauseMirrorTopicsRequestData().setMirrorName("m1").setTopics(topics).setStateValidationOffset(7L);
    }

    static PauseMirrorTopicsResponseData pauseMirrorTopicsResponse() {
        return new PauseMirrorTopicsResponseData()
                .setThrottleTimeMs(17).setErrorCode((short) 2).setErrorMessage("e1")
                .setTopics(List.of(
                        new PauseMirrorTopicsResponseData.TopicResult()
                                .setName("orders").setErrorCode((short) 3).setErrorMessage("e2"),
                        new PauseMirrorTopicsResponseData.TopicResult()
                                .setName("payments").setErrorCode((short) 4).setErrorMessage(null)));
    }

    static ResumeMirrorTopicsRequestData resumeMirrorTopicsRequest() {
        var topics = new ResumeMirrorTopicsRequestData.TopicMetadataCollection();
        topics.add(new ResumeMirrorTopicsRequestData.TopicMetadata().setTopicName("orders"));
        topics.add(new ResumeMirrorTopicsRequestData.TopicMetadata().setTopicName("payments"));
        return new ResumeMirrorTopicsRequestData().setMirrorName("m1").setTopics(topics).setStateValidationOffset(8L);
    }

    static ResumeMirrorTopicsResponseData resumeMirrorTopicsResponse() {
        return new ResumeMirrorTopicsResponseData()
                .setThrottleTimeMs(18).setErrorCode((short) 2).setErrorMessage("e1")
                .setTopics(List.of(
                        new ResumeMirrorTopicsResponseData.TopicResult()
                                .setName("orders").setErrorCode((short) 3).setErrorMessage("e2"),
                        new ResumeMirrorTopicsResponseData.TopicResult()
                                .setName("payments").setErrorCode((short) 4).setErrorMessage(null)));
    }

    static DeleteClusterMirrorRequestData deleteClusterMirrorRequest() {
        return new DeleteClusterMirrorRequestData().setMirrorName("m1").setStateValidationOffset(9L);
    }

    static DeleteClusterMirrorResponseData deleteClusterMirrorResponse() {
        return new DeleteClusterMirrorResponseData()
                .setThrottleTimeMs(19).setErrorCode((short) 2).setErrorMessage("e1");
    }

    static BumpLeaderEpochsRequestData bumpLeaderEpochsRequest() {
        return new BumpLeaderEpochsRequestData().setTopics(List.of(
                new BumpLeaderEpochsRequestData.TopicState()
                        .setTopicId(TOPIC_ID_1)
                        .setPartitions(List.of(
                                new BumpLeaderEpochsRequestData.LeaderEpochState()
                                        .setPartitionIndex(1).setMinLeaderEpoch(4),
                                new BumpLeaderEpochsRequestData.LeaderEpochState()
                                        .setPartitionIndex(2).setMinLeaderEpoch(5))),
                new BumpLeaderEpochsRequestData.TopicState()
                        .setTopicId(TOPIC_ID_2)
                        .setPartitions(List.of(new BumpLeaderEpochsRequestData.LeaderEpochState()
                                .setPartitionIndex(3).setMinLeaderEpoch(6)))));
    }

    static BumpLeaderEpochsResponseData bumpLeaderEpochsResponse() {
        return new BumpLeaderEpochsResponseData()
                .setThrottleTimeMs(20).setErrorCode((short) 2).setErrorMessage("e1")
                .setTopics(List.of(new BumpLeaderEpochsResponseData.TopicPartitions()
                        .setTopicName("orders")
                        .setPartitions(List.of(
                                new BumpLeaderEpochsResponseData.PartitionDetail()
                                        .setPartitionIndex(1).setErrorCode((short) 3).setErrorMessage("e2"),
                                new BumpLeaderEpochsResponseData.PartitionDetail()
                                        .setPartitionIndex(2).setErrorCode((short) 4).setErrorMessage(null)))));
    }

    /** The prototype's schema has the record's version as its first field (int16), kept at 0. */
    static MirrorPidResetRecord mirrorPidResetRecord() {
        return new MirrorPidResetRecord().setVersion(V0).setSourceClusterId("src-cluster-1");
    }

    /** The key as the prototype's MemoryRecordsBuilder.appendControlRecord serializes it. */
    static byte[] controlRecordKey() {
        Struct key = ControlRecordType.MIRROR_PID_RESET.recordKey();
        ByteBuffer buf = ByteBuffer.allocate(key.sizeOf());
        key.writeTo(buf);
        return buf.array();
    }

    /**
     * The whole batch from the prototype's own helper, the one its broker uses to write the marker.
     * The helper fixes the rest: magic 2, no compression, CREATE_TIME, producer id -1, producer
     * epoch -1, base sequence -1, not transactional, control attribute set.
     */
    static byte[] mirrorPidResetBatch() {
        MemoryRecords records = MemoryRecords.withMirrorPidResetRecord(BATCH_BASE_OFFSET, BATCH_TIMESTAMP,
                BATCH_LEADER_EPOCH, ByteBuffer.allocate(256), mirrorPidResetRecord());
        return MessageUtil.byteBufferToArray(records.buffer());
    }

    // ---- How the prototype reads the two byte-exact samples (their .json, and check's diagnosis).

    static JsonNode readControlRecordKey(byte[] bytes) {
        ByteBuffer buf = ByteBuffer.wrap(bytes);
        ControlRecordType type = ControlRecordType.parse(buf);
        ObjectNode out = JSON.createObjectNode();
        out.put("version", buf.getShort(0));
        out.put("type", ControlRecordType.parseTypeId(buf));
        out.put("typeName", type.name());
        return out;
    }

    static JsonNode readBatch(byte[] bytes) {
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(bytes));
        List<MutableRecordBatch> batches = new ArrayList<>();
        records.batches().forEach(batches::add);
        if (batches.size() != 1) {
            throw new IllegalArgumentException(batches.size() + " batches where one was expected");
        }
        RecordBatch batch = batches.get(0);
        ObjectNode out = JSON.createObjectNode();
        out.put("sizeInBytes", batch.sizeInBytes());
        out.put("trailingBytes", bytes.length - records.validBytes());
        String crc;
        try {
            batch.ensureValid();
            crc = "valid";
        } catch (RuntimeException e) {
            crc = e.toString();
        }
        out.put("crc", crc);
        out.put("baseOffset", batch.baseOffset());
        out.put("lastOffset", batch.lastOffset());
        out.put("partitionLeaderEpoch", batch.partitionLeaderEpoch());
        out.put("magic", batch.magic());
        out.put("compression", batch.compressionType().name);
        out.put("timestampType", batch.timestampType().name);
        out.put("maxTimestamp", batch.maxTimestamp());
        out.put("producerId", batch.producerId());
        out.put("producerEpoch", batch.producerEpoch());
        out.put("baseSequence", batch.baseSequence());
        out.put("isTransactional", batch.isTransactional());
        out.put("isControlBatch", batch.isControlBatch());
        ArrayNode recs = out.putArray("records");
        for (Record record : batch) {
            ObjectNode r = recs.addObject();
            r.put("offset", record.offset());
            r.put("timestamp", record.timestamp());
            r.put("headers", record.headers().length);
            if (!record.hasKey()) {
                r.putNull("key");
                continue;
            }
            r.put("key", HEX.formatHex(MessageUtil.byteBufferToArray(record.key())));
            r.put("value", record.hasValue() ? HEX.formatHex(MessageUtil.byteBufferToArray(record.value())) : null);
            ControlRecordType type = ControlRecordType.parse(record.key());
            r.put("controlType", type.name());
            if (type == ControlRecordType.MIRROR_PID_RESET) {
                MirrorPidResetRecord value = ControlRecordUtils.deserializeMirrorPidResetRecord(record);
                r.set("mirrorPidResetRecord", MirrorPidResetRecordJsonConverter.write(value, V0));
                r.put("equalsSample", value.equals(mirrorPidResetRecord()));
            }
        }
        return out;
    }

    // ---- The two modes.

    static int write(Path dir) throws Exception {
        Files.createDirectories(dir);
        List<Sample> all = samples();
        for (Sample sample : all) {
            Files.write(dir.resolve(sample.name() + ".bin"), sample.encode());
            Files.writeString(dir.resolve(sample.name() + ".json"),
                    JSON.writerWithDefaultPrettyPrinter().writeValueAsString(sample.describe()) + "\n");
        }
        System.out.println("wrote " + all.size() + " samples to " + dir);
        return 0;
    }

    static int check(Path dir) throws Exception {
        int failures = 0;
        for (Sample sample : samples()) {
            Path file = dir.resolve(sample.name() + ".bin");
            String report;
            if (!Files.isRegularFile(file)) {
                report = "MISSING " + sample.name();
            } else {
                try {
                    report = sample.check(Files.readAllBytes(file));
                } catch (Exception e) {
                    report = "UNDECODABLE " + sample.name() + ": " + e;
                }
            }
            if (report == null) {
                System.out.println("OK " + sample.name());
            } else {
                System.out.println(report);
                failures++;
            }
        }
        return failures == 0 ? 0 : 1;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2 || !(args[0].equals("write") || args[0].equals("check"))) {
            System.err.println("usage: Golden.java write|check DIR");
            System.exit(2);
        }
        Path dir = Path.of(args[1]);
        System.exit(args[0].equals("write") ? write(dir) : check(dir));
    }
}
