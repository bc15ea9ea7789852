// What every client script here shares: where the servers are, talking to the test over
// stdin/stdout (one JSON object a line), writes made behind the clients' backs, and waiting
// for a cache to show something.
import { createInterface } from "node:readline";

export const env = process.env;
export const httpUrl = env.MEDIAGRAPH_HTTP_URL;
export const wsUrl = env.MEDIAGRAPH_WS_URL;

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

export function say(message) {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

// Tells the test what happened and waits for its answer (it changes things meanwhile).
export async function ask(message) {
  say(message);
  const { value, done } = await lines.next();
  if (done) throw new Error("the test closed stdin");
  return JSON.parse(value);
}

// A write through plain HTTP, so no client cache sees its answer: only pushes can tell them.
export async function post(query, variables, token) {
  const response = await fetch(httpUrl, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ query, variables }),
  });
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

export async function recordView(mediaId) {
  await post("mutation ($id: ID!) { recordView(mediaId: $id) { counted } }", { id: mediaId });
}

export async function submitScore(board, userId, score) {
  await post(
    "mutation ($b: String!, $u: ID!, $s: Float!) { submitScore(leaderboard: $b, userId: $u, score: $s) { changed } }",
    { b: board, u: userId, s: score },
    env.SERVICE_TOKEN,
  );
}

// Resolves with the first value `read` returns that `done` accepts, polling (caches
// notify asynchronously); fails after `seconds`.
export async function until(read, done, seconds = 30) {
  const deadline = Date.now() + seconds * 1000;
  let last;
  while (Date.now() < deadline) {
    last = await read();
    if (last !== undefined && done(last)) return last;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`timed out; last seen ${JSON.stringify(last)}`);
}

export function run(main) {
  main().then(
    () => process.exit(0),
    (error) => {
      process.stderr.write(`${error?.stack ?? error}\n`);
      process.exit(1);
    },
  );
}
