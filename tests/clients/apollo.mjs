// Apollo Client with the cache of docs/clients.md: pushes update cached objects with no
// updater ("push"), and the mediaList field policy keeps every page's `omitted` ("omitted").
import { gql } from "@apollo/client";
import WebSocket from "ws";

import { createApolloClient } from "./apollo-client.js";
import { ask, env, httpUrl, recordView, run, say, submitScore, until, wsUrl } from "./support.js";

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
const RANKED = gql`
  query Ranked($tags: [String!], $after: String) {
    mediaList(sort: VIEWS, tags: $tags, first: 2, after: $after) {
      edges { cursor node { id viewCount } }
      omitted { id viewCount }
      pageInfo { hasNextPage endCursor }
    }
  }
`;

const client = createApolloClient({ httpUrl, wsUrl, webSocketImpl: WebSocket });

async function pushes() {
  const variables = { id: env.MEDIA_ID, board: env.BOARD };
  const before = (await client.query({ query: PAGE, variables })).data;
  const seen = { viewCount: 0, top: 0 };
  const fail = (error) => {
    throw error;
  };
  client.subscribe({ query: VIEW_COUNT, variables }).subscribe({ next: () => (seen.viewCount += 1), error: fail });
  client.subscribe({ query: TOP, variables }).subscribe({ next: () => (seen.top += 1), error: fail });
  // Each subscription answers with the current state first: then both are live.
  await until(() => ({ ...seen }), (counts) => counts.viewCount > 0 && counts.top > 0);
  await recordView(env.MEDIA_ID);
  const [first, , third] = JSON.parse(env.PLAYERS);
  await submitScore(env.BOARD, first, 30);
  await submitScore(env.BOARD, third, 25);
  // Read from the cache alone: only the pushes can have put the new values there.
  const after = await until(
    () => client.readQuery({ query: PAGE, variables }),
    (data) => data.media.viewCount === 1 && data.leaderboard.top.edges[0].node.score === 30 && data.leaderboard.top.edges[1].node.score === 25,
  );
  say({ before, after });
}

async function omitted() {
  const variables = { tags: [env.TAG] };
  // What useQuery + fetchMore do in a component: one watched query, pages merged by the policy.
  const query = client.watchQuery({ query: RANKED, variables });
  const watching = query.subscribe({ error: (error) => {
    throw error;
  } });
  const cached = () => client.readQuery({ query: RANKED, variables })?.mediaList;
  let page = await until(cached, (list) => list != null);
  for (let number = 1; page.pageInfo.hasNextPage; number += 1) {
    await ask({ page: number, ids: page.edges.map((edge) => edge.node.id) });
    await query.fetchMore({ variables: { after: page.pageInfo.endCursor } });
    page = cached();
  }
  watching.unsubscribe();
  const final = cached();
  say({ edges: final.edges.map((edge) => edge.node.id), omitted: final.omitted.map((media) => media.id) });
}

run(async () => {
  await (env.SCENARIO === "omitted" ? omitted() : pushes());
  client.stop();
});
