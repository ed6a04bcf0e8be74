'use strict';
// A client process: `node http-client.js URL REQUESTS METHOD CONCURRENCY` sends REQUESTS
// requests with CONCURRENCY in flight and prints the count of each status as JSON.
const [url, requests, method, concurrency] = process.argv.slice(2);
const counts = {};
let left = Number(requests);
async function worker() {
  while (left > 0) {
    left -= 1;
    const response = await fetch(url, { method });
    await response.arrayBuffer();
    counts[response.status] = (counts[response.status] ?? 0) + 1;
  }
}
Promise.all(Array.from({ length: Number(concurrency) }, worker)).then(() => {
  process.stdout.write(JSON.stringify(counts));
});
