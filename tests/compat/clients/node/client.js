// The compatibility client over kafkajs, with the snappy and lz4 codecs it takes as plugins
// (kafkajs-snappy, kafkajs-lz4). Operations, as for every client of tests/compat:
//   create BOOTSTRAP TOPIC PARTITIONS | produce BOOTSTRAP TOPIC CODEC COUNT PREFIX |
//   consume BOOTSTRAP TOPIC GROUP COUNT | committed BOOTSTRAP TOPIC GROUP | offsets BOOTSTRAP TOPIC |
//   version
// Each prints one JSON line. kafkajs reports a base offset per partition, not per record, so
// produce prints each record's partition and offset as null.
'use strict';
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs');
const SnappyCodec = require('kafkajs-snappy');
const LZ4Codec = require('kafkajs-lz4');

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec;

const CODECS = {
  none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4, zstd: CompressionTypes.ZSTD,
};
const CONSUME_TIMEOUT_MS = 40000;
const key = (prefix, i) => `${prefix}-${i}`;
// Values compress well, so that clients that skip a codec when it does not pay still use it.
const value = (prefix, i) => `value ${i} of ${prefix} ` + 'x'.repeat(100);
const text = (b) => (b === null ? null : b.toString());

async function create(kafka, topic, partitions) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const made = await admin.createTopics({
      topics: [{ topic, numPartitions: Number(partitions), replicationFactor: 1 }],
      waitForLeaders: true,
    });
    if (!made) throw new Error(`createTopics answered that ${topic} exists`);
  } finally {
    await admin.disconnect();
  }
  return { created: topic };
}

async function produce(kafka, topic, codec, count, prefix) {
  if (!(codec in CODECS)) throw new Error(`unknown codec ${codec}`);
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const messages = [];
  for (let i = 0; i < Number(count); i++) messages.push({ key: key(prefix, i), value: value(prefix, i) });
  try {
    await producer.send({ topic, acks: -1, compression: CODECS[codec], messages });
  } finally {
    await producer.disconnect();
  }
  return { acked: messages.map((m) => ({ partition: null, offset: null, key: m.key, value: m.value })) };
}

async function consume(kafka, topic, group, count) {
  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const records = [];
  const next = {};
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  const timer = setTimeout(() => finish(), CONSUME_TIMEOUT_MS);
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      records.push({ partition, offset: Number(message.offset), key: text(message.key), value: text(message.value) });
      next[partition] = (BigInt(message.offset) + 1n).toString();
      if (records.length >= Number(count)) finish();
    },
  });
  await done;
  clearTimeout(timer);
  const commits = Object.entries(next).map(([partition, offset]) => ({ topic, partition: Number(partition), offset }));
  if (commits.length) await consumer.commitOffsets(commits);
  await consumer.disconnect();
  return { records };
}

async function committed(kafka, topic, group) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const answer = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    const out = {};
    for (const p of answer.find((t) => t.topic === topic).partitions) out[p.partition] = Number(p.offset);
    return { committed: out };
  } finally {
    await admin.disconnect();
  }
}

async function offsets(kafka, topic) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const out = { earliest: {}, latest: {} };
    for (const p of await admin.fetchTopicOffsets(topic)) {
      out.earliest[p.partition] = Number(p.low);
      out.latest[p.partition] = Number(p.high);
    }
    return out;
  } finally {
    await admin.disconnect();
  }
}

const OPERATIONS = { create, produce, consume, committed, offsets };
const ARITY = { create: 1, produce: 3, consume: 2, committed: 1, offsets: 0 };

async function main() {
  const [op, bootstrap, topic, ...args] = process.argv.slice(2);
  if (op === 'version' && !bootstrap) {
    console.log(JSON.stringify({ version: require('kafkajs/package.json').version }));
    return;
  }
  if (!(op in OPERATIONS) || args.length !== ARITY[op] || !topic) {
    throw new Error(`usage: OP BOOTSTRAP TOPIC ARGS..., got ${process.argv.slice(2)}`);
  }
  const kafka = new Kafka({ clientId: 'compat-kafkajs', brokers: [bootstrap], logLevel: logLevel.WARN });
  console.log(JSON.stringify(await OPERATIONS[op](kafka, topic, ...args)));
  // kafkajs may keep retry timers alive after a failed fetch; the answer is out, so end here.
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  console.log(JSON.stringify({ error: `${e.name}: ${e.message}` }));
  process.exit(1);
});
