// kafkajs against `python -m storage serve`: create a topic, produce keyed records
// (idempotent, acks=all), consume them in a group and commit, then produce more and resume in
// the same group at the committed offsets.  Prints one line per step; exits 1 on any failure.
//
//   node wire_client_check.js BOOTSTRAP TOPIC GROUP COUNT     (NODE_PATH: where kafkajs is)
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, topic, group, countText] = process.argv.slice(2);
const count = Number(countText);
const kafka = new Kafka({ clientId: "kafkajs-check", brokers: [bootstrap], logLevel: logLevel.NOTHING });

async function produce(start, n) {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const messages = [];
  for (let i = start; i < start + n; i++) messages.push({ key: `key-${i % 7}`, value: `value-${i}` });
  await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();
  console.log(`produced ${n}`);
}

async function consume(want) {
  const consumer = kafka.consumer({ groupId: group, rebalanceTimeout: 10000, sessionTimeout: 10000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => resolve(), 40000);
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        got.push(message.value.toString());
        await consumer.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }]);
        if (got.length >= want) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  console.log(`consumed ${got.length}`);
  return got;
}

function same(got, from, n) {
  const want = [];
  for (let i = from; i < from + n; i++) want.push(`value-${i}`);
  return JSON.stringify([...got].sort()) === JSON.stringify(want.sort());
}

(async () => {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 1 }], waitForLeaders: true });
  const meta = await admin.fetchTopicMetadata({ topics: [topic] });
  console.log(`created ${topic} ${meta.topics[0].partitions.length}`);
  await admin.disconnect();
  await produce(0, count);
  const first = await consume(count);
  await produce(count, 10);
  const resumed = await consume(10);
  if (!same(first, 0, count)) { console.error(`first read: ${first.length} records`); process.exit(1); }
  if (!same(resumed, count, 10)) { console.error(`resumed read: ${resumed}`); process.exit(1); }
  console.log(`ok ${first.length} ${resumed.length}`);
  process.exit(0);
})().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
