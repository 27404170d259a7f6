// examples/library/loan-thin.mjs — the seed's loan-thin ("Service Mesh"), its business logic
// line for line. Three lines differ: it calls the fee service by its name (`http://fee…`), as
// an app that knows nothing of a mesh would, not a sidecar's local port; it answers a health
// probe without calling the fee; it listens on the port `hopwise up` gives it (PORT).
//
//   sudo hopwise up examples/library/loan-thin.yaml --captured
//   curl http://<loan's app address in up's table>/balance/U-41
import { createServer } from "node:http";

const attempt = (path, method) => fetch(`http://fee${path}`, { method })
  .then(async (y) => ({ code: y.status, body: await y.text() }));

const json = (y, code, g) => {
  y.writeHead(code, { "Content-Type": "application/json" });
  y.end(JSON.stringify(g));
};

const port = Number(process.env.PORT ?? 8753);
createServer(async (q, y) => {
  if (q.url === "/healthz") return json(y, 200, { ok: true });
  const [root, member] = q.url.split("/").filter(Boolean);
  const job = root === "pay" ? { path: "/penalty/pay", method: "POST" }
    : { path: `/penalty/${member}`, method: "GET" };
  const s = await attempt(job.path, job.method, root);
  json(y, s.code, { action: root, code: s.code, body: s.body });
}).listen(port, "127.0.0.1", () => console.log(`loan-thin 127.0.0.1:${port}`));
