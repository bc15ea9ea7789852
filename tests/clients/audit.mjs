// The GraphQL-over-HTTP audits of graphql-http (the spec's reference implementation) against
// the server at AUDIT_URL: one JSON line with every audit's id, name, status and reason.
import { auditServer } from "graphql-http";

const results = await auditServer({ url: process.env.AUDIT_URL });
const audits = await Promise.all(
  results.map(async (result) => ({
    id: result.id,
    name: result.name,
    status: result.status,
    reason: result.status === "ok" ? null : result.reason,
    response:
      result.status === "ok" || !result.response
        ? null
        : {
            status: result.response.status,
            contentType: result.response.headers.get("content-type"),
            body: await result.response.text().catch(() => null),
          },
  })),
);
console.log(JSON.stringify(audits));
