// urql with graphcache as docs/clients.md sets it up: pushes update cached objects with no updater.
import { gql } from "@urql/core";
import WebSocket from "ws";

import { env, httpUrl, recordView, run, say, submitScore, until, wsUrl } from "./support.js";
import { createUrqlClient } from "./urql-client.js";

const PAGE = gql`
  query Page($id: ID!, $board: String!) {
    media(id: $id) { id title viewCount }
    leaderboard(name: $board) { id top(first: 3) { edges { node { id rank score user { id } } } } }
  }
`;
const VIEW_COUNT = gql`
  subscription ViewCount($id: ID!) { viewCount(mediaId: $id) { media { id viewCount } } }
`;
const TOP = gql`
  subscription Top($board: String!) {
    leaderboardTop(name: $board, first: 3) {
      entries { id rank score }
      leaderboard { id top(first: 3) { edges { node { id rank score user { id } } } } }
    }
  }
`;

run(async () => {
  const client = createUrqlClient({ httpUrl, wsUrl, webSocketImpl: WebSocket });
  const variables = { id: env.MEDIA_ID, board: env.BOARD };
  const first = await client.query(PAGE, variables).toPromise();
  if (first.error) throw first.error;
  const seen = { viewCount: 0, top: 0 };
  const fail = (result) => {
    if (result.error) throw result.error;
  };
  const subscriptions = [
    client.subscription(VIEW_COUNT, variables).subscribe((result) => (fail(result), (seen.viewCount += 1))),
    client.subscription(TOP, variables).subscribe((result) => (fail(result), (seen.top += 1))),
  ];
  await until(() => ({ ...seen }), (counts) => counts.viewCount > 0 && counts.top > 0);
  await recordView(env.MEDIA_ID);
  const [player, , newcomer] = JSON.parse(env.PLAYERS);
  await submitScore(env.BOARD, player, 30);
  await submitScore(env.BOARD, newcomer, 25);
  // cache-only: the answer comes from graphcache, where only the pushes can have written.
  const cached = async () => (await client.query(PAGE, variables, { requestPolicy: "cache-only" }).toPromise()).data;
  const after = await until(
    cached,
    (data) => data?.media.viewCount === 1 && data.leaderboard.top.edges[0].node.score === 30 && data.leaderboard.top.edges[1].node.score === 25,
  );
  say({ before: first.data, after });
  for (const subscription of subscriptions) subscription.unsubscribe();
});
