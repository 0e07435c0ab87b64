// Resource subscriptions through the official TypeScript SDK client: subscribed to a file the
// `files` plugin serves, the client hears `notifications/resources/updated` when a tool
// writes it, and nothing once it unsubscribes.
//   node ts_updates.mjs ROOT_DIR URL
// Prints one line per check and ends with `N passed, M failed`; exit 1 if any failed.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

let passed = 0;
let failed = 0;
function check(name, ok, detail = "") {
  ok ? passed++ : failed++;
  console.log(`${ok ? "PASS" : "FAIL"} ${name}${detail ? `: ${detail}` : ""}`);
}

async function eventually(predicate, ms = 5000) {
  for (let waited = 0; waited < ms && !predicate(); waited += 50) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return predicate();
}

const [root, url] = process.argv.slice(2);
try {
  const updates = [];
  const client = new Client({ name: "ts-updates", version: "1.0.0" });
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { updates.push(n.params.uri); });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const label = `[ts ${client.transport?.protocolVersion ?? "?"}]`;
  const path = join(root, "ts-note.txt");
  writeFileSync(path, "v1");
  const uri = pathToFileURL(path).href;

  await client.subscribeResource({ uri });
  const written = await client.callTool({ name: "write_file", arguments: { path, content: "v2" } });
  check(`${label} write_file`, !written.isError, JSON.stringify(written.content));
  check(`${label} the subscriber hears the write`, await eventually(() => updates.includes(uri)), JSON.stringify(updates));
  const read = await client.readResource({ uri });
  check(`${label} the resource reads the new content`, read.contents[0]?.text === "v2", JSON.stringify(read.contents));

  await client.unsubscribeResource({ uri });
  const before = updates.length;
  await client.callTool({ name: "write_file", arguments: { path, content: "v3" } });
  await new Promise((resolve) => setTimeout(resolve, 1000));
  check(`${label} nothing after unsubscribing`, updates.length === before, JSON.stringify(updates.slice(before)));
  await client.close();
} catch (e) {
  check("run", false, String(e?.stack ?? e));
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
