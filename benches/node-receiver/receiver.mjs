// The comparison receiver for the load benchmark: a minimal Node server that does
// what `supervise serve`'s intake does before storing — read the body, check
// X-Hub-Signature-256 with @octokit/webhooks — and answers 202. It stores nothing.
import http from "node:http";
import { Webhooks } from "@octokit/webhooks";

const webhooks = new Webhooks({ secret: process.env.SECRET });
http
  .createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks).toString("utf8");
    const ok = await webhooks.verify(body, req.headers["x-hub-signature-256"] ?? "");
    res.writeHead(ok ? 202 : 401, { "content-type": "text/plain" }).end(ok ? "stored\n" : "bad signature\n");
  })
  .listen(Number(process.env.PORT), "127.0.0.1", () => console.log("listening"));
