// relay-runtime with the environment and the keepOmitted updater of docs/clients.md, running the
// documents relay-compiler compiled: a push updates the store with no updater ("push"), and the
// updater keeps every page's `omitted` on the connection ("omitted").
import { ConnectionHandler, commitLocalUpdate, fetchQuery, requestSubscription } from "relay-runtime";
import WebSocket from "ws";

import { ask, env, httpUrl, recordView, run, say, until, wsUrl } from "../support.js";
import { createRelayEnvironment } from "../relay-environment.js";
import { keepOmitted } from "../relay-omitted.js";
import RankedMediaPaginationQuery from "./src/__generated__/RankedMediaPaginationQuery.graphql.js";
import viewCountSubscription from "./src/__generated__/appViewCountSubscription.graphql.js";

const environment = createRelayEnvironment({ httpUrl, wsUrl, webSocketImpl: WebSocket });
const KEY = "app_rankedMedia_mediaList";

async function push() {
  const record = () => environment.getStore().getSource().get(env.MEDIA_ID);
  requestSubscription(environment, {
    subscription: viewCountSubscription,
    variables: { id: env.MEDIA_ID },
    onError: (error) => {
      throw error;
    },
  });
  await until(record, (media) => media?.viewCount === 0);
  await recordView(env.MEDIA_ID);
  const media = await until(record, (found) => found?.viewCount === 1);
  say({ media: { id: media.id, viewCount: media.viewCount } });
}

function connectionNow(filters) {
  let seen;
  commitLocalUpdate(environment, (store) => {
    const connection = ConnectionHandler.getConnection(store.getRoot(), KEY, filters);
    seen = {
      edges: (connection.getLinkedRecords("edges") ?? []).map((edge) => edge.getLinkedRecord("node").getDataID()),
      keptOmitted: (connection.getLinkedRecords("keptOmitted") ?? []).map((media) => media.getDataID()),
      lastPageOmitted: (connection.getLinkedRecords("omitted") ?? []).map((media) => media.getDataID()),
      pageInfo: connection.getLinkedRecord("pageInfo").getValue("hasNextPage"),
      endCursor: connection.getLinkedRecord("pageInfo").getValue("endCursor"),
    };
  });
  return seen;
}

async function omitted() {
  const filters = { sort: "VIEWS", tags: [env.TAG] };
  let after = null;
  for (let number = 1; ; number += 1) {
    const variables = { first: 2, after, tags: [env.TAG] };
    await fetchQuery(environment, RankedMediaPaginationQuery, variables).toPromise();
    // What `loadNext(2, { onComplete })` would run for this page.
    commitLocalUpdate(environment, (store) => keepOmitted(store, { key: KEY, filters, page: { ...filters, ...variables } }));
    const seen = connectionNow(filters);
    if (!seen.pageInfo) break;
    await ask({ page: number, ids: seen.edges });
    after = seen.endCursor;
  }
  say(connectionNow(filters));
}

run(async () => {
  await (env.SCENARIO === "omitted" ? omitted() : push());
});
