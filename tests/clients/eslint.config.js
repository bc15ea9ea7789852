// @graphql-eslint over the printed schema (`uv run mediagraph schema > schema.graphql`): Relay's
// rules for connections, edges, page info and pagination arguments, and a reason on every
// deprecation. tests/test_clients.py runs it; a finding fails the test.
import graphql from "@graphql-eslint/eslint-plugin";

export default [
  {
    files: ["schema.graphql"],
    languageOptions: {
      parser: graphql.parser,
      parserOptions: { graphQLConfig: { schema: "schema.graphql" } },
    },
    plugins: { "@graphql-eslint": graphql },
    rules: {
      "@graphql-eslint/relay-arguments": ["error", { includeBoth: true }],
      "@graphql-eslint/relay-connection-types": "error",
      "@graphql-eslint/relay-edge-types": [
        "error",
        { withEdgeSuffix: true, shouldImplementNode: true, listTypeCanWrapOnlyEdgeType: false },
      ],
      "@graphql-eslint/relay-page-info": "error",
      "@graphql-eslint/require-deprecation-reason": "error",
      "@graphql-eslint/strict-id-in-types": [
        "error",
        {
          acceptedIdNames: ["id"],
          acceptedIdTypes: ["ID"],
          // Types that are not objects a client refetches: connections, edges, payloads, pushes.
          exceptions: {
            suffixes: ["Connection", "Edge", "Payload", "Update", "Info", "Bucket", "Heartbeat", "Entry", "Top"],
            types: ["Query", "Mutation", "Subscription", "DeletedMedia", "DeletedPost", "HotMediaDay", "PlaybackStats"],
          },
        },
      ],
    },
  },
];
