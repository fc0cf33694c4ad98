// BullMQ driver for bench/compare/peer_bullmq.py.
//   node bench.mjs enqueue-one|enqueue-bulk|enqueue-due <redis-url> <dues.json>
//       adds one job per due time (ms since epoch); prints {"seconds": <time spent adding>}
//   node bench.mjs worker <redis-url> <concurrency>
//       runs a Worker; each job appends "<due_ms> <start_ms>" to $BENCH_RECORD
import { readFileSync, openSync, writeSync } from "node:fs";
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const [cmd, url, arg] = process.argv.slice(2);
const connection = new IORedis(url, { maxRetriesPerRequest: null });
const QUEUE = "bench";
const OPTS = { removeOnComplete: true, removeOnFail: true };
const BATCH = 1000;

async function enqueue(mode, dues) {
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();
  const t0 = process.hrtime.bigint();
  if (mode === "enqueue-one") {
    for (const due of dues) {
      await queue.add("task", { due }, { ...OPTS, delay: Math.max(0, due - Date.now()) });
    }
  } else {
    for (let i = 0; i < dues.length; i += BATCH) {
      const jobs = dues.slice(i, i + BATCH).map((due) => ({
        name: "task", data: { due },
        opts: mode === "enqueue-due" ? OPTS : { ...OPTS, delay: Math.max(0, due - Date.now()) },
      }));
      await queue.addBulk(jobs);
    }
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ seconds }));
  await queue.close();
  await connection.quit();
}

function work(concurrency) {
  const fd = openSync(process.env.BENCH_RECORD, "a");
  const worker = new Worker(QUEUE, async (job) => {
    const start = performance.timeOrigin + performance.now(); // epoch ms, sub-ms resolution
    writeSync(fd, `${Math.trunc(job.data.due)} ${start.toFixed(3)}\n`);
  }, { connection, concurrency });
  const stop = async () => { await worker.close(); process.exit(0); };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

if (cmd === "worker") {
  work(Number(arg));
} else {
  await enqueue(cmd, JSON.parse(readFileSync(arg, "utf8")));
}
