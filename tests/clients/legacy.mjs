// subscriptions-transport-ws, the legacy `graphql-ws` subprotocol older Apollo apps speak.
import { SubscriptionClient } from "subscriptions-transport-ws";
import WebSocket from "ws";

import { env, recordView, run, say, until, wsUrl } from "./support.js";

run(async () => {
  const client = new SubscriptionClient(
    wsUrl,
    { connectionParams: { authorization: `Bearer ${env.USER_TOKEN}` }, reconnect: false },
    WebSocket,
  );
  const pushed = [];
  const errors = [];
  const watch = (query, variables) =>
    client.request({ query, variables }).subscribe({
      next: (result) => pushed.push(result),
      error: (error) => errors.push(error),
    });
  watch("subscription ($id: ID!) { viewCount(mediaId: $id) { media { id viewCount } } }", { id: env.MEDIA_ID });
  await until(() => pushed.length, (count) => count === 1);
  await recordView(env.MEDIA_ID);
  await until(() => pushed.at(-1).data.viewCount.media.viewCount, (count) => count === 1);
  // A query over the socket, answered as the viewer the token names, and a coded error.
  watch("{ me { username } }", {});
  watch("subscription { viewCount(mediaId: \"TWVkaWE6OTk5OTk5OTk5OQ\") { media { id } } }", {});
  await until(() => pushed.length, (count) => count >= 4);
  client.close();
  say({ pushed, errors });
});
