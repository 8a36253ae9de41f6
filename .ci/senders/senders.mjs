// Cross-check of ctoken's webhook schemes with the senders' own libraries.
// Run by webhook/senders_test.go (TestSendersCrossCheck), which .ci/webhook-senders.sh
// starts after installing the packages below next to a copy of this file.
//
//   node senders.mjs sign     prints deliveries signed by the libraries (JSON)
//   node senders.mjs verify   reads deliveries signed by ctoken (JSON, stdin),
//                             prints each library's verdict (JSON)
//   node senders.mjs versions prints the installed package versions (JSON)
//
// Clocks are pinned (Date.now, Stripe's receivedAt, Slack's nowMilliseconds)
// so that the tolerance edges are compared exactly.
import { createRequire } from "node:module";
import crypto from "node:crypto";
import fs from "node:fs";

const require = createRequire(import.meta.url);
const { Webhook: StandardWebhook } = require("standardwebhooks");
const { Webhook: SvixWebhook } = require("svix");
const Stripe = require("stripe");
const { verifySlackRequest } = require("@slack/bolt");
const octokit = await import("@octokit/webhooks-methods");

const stripe = Stripe("sk_test_cross_check_offline");
const realNow = Date.now;
const withClock = (ms, f) => {
  Date.now = () => ms;
  try {
    return f();
  } finally {
    Date.now = realNow;
  }
};

// Ed25519 keys from raw bytes (RFC 8410 DER prefixes).
const edPrivate = (seed) =>
  crypto.createPrivateKey({ key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]), format: "der", type: "pkcs8" });
const edPublic = (raw) =>
  crypto.createPublicKey({ key: Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), raw]), format: "der", type: "spki" });
const b64 = (s, prefix) => Buffer.from(s.slice(prefix.length), "base64");

const T = 1700000000; // signing time of every library-signed delivery
const bodies = [
  '{"type":"contact.created","data":{"id":"1f81eb52"}}',
  '{"text":"caf\u00e9 \u00fc\u00f1\u00ee\u00e7\u00f8d\u00e9 \ud83d\ude00","n":[1,2.5,null]}',
  '{\n  "pretty": true,\n  "tabs": "\\t"\n}\n',
];
const stdSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const stdSecret2 = "whsec_" + Buffer.from("cross-check-second-secret-24b").toString("base64");
const stripeSecret = "whsec_cross_check_secret";
const githubSecret = "It's a Secret to Everybody";
const edSeed = "whsk_" + Buffer.from("cross-check-ed25519-seed-32bytes").toString("base64");

async function sign() {
  const out = [];
  bodies.forEach((body, i) => {
    const id = `msg_cross${i}`;
    const sig = new StandardWebhook(stdSecret).sign(id, new Date(T * 1000), body);
    const sig2 = new StandardWebhook(stdSecret2).sign(id, new Date(T * 1000), body);
    for (const [nowMs, label] of [[T * 1000, "at signing"], [(T + 300) * 1000 + 999, "300.999 s later"]]) {
      out.push({ lib: "standardwebhooks", scheme: "standard-webhooks", label, secrets: [stdSecret], now_ms: nowMs, id, body,
        headers: { "webhook-id": id, "webhook-timestamp": String(T), "webhook-signature": sig } });
    }
    out.push({ lib: "standardwebhooks", scheme: "standard-webhooks", label: "two entries, second secret", secrets: [stdSecret2], now_ms: T * 1000, id, body,
      headers: { "webhook-id": id, "webhook-timestamp": String(T), "webhook-signature": `${sig} ${sig2}` } });
    const svixSig = new SvixWebhook(stdSecret).sign(id, new Date(T * 1000), body);
    out.push({ lib: "svix", scheme: "svix", label: "at signing", secrets: [stdSecret], now_ms: T * 1000, id, body,
      headers: { "svix-id": id, "svix-timestamp": String(T), "svix-signature": svixSig } });
    const stripeBody = JSON.stringify({ id: `evt_cross${i}`, object: "event", data: JSON.parse(body) });
    const stripeHeader = stripe.webhooks.generateTestHeaderString({ payload: stripeBody, secret: stripeSecret, timestamp: T });
    for (const [nowMs, label] of [[T * 1000, "at signing"], [(T + 300) * 1000 + 999, "300.999 s later"]]) {
      out.push({ lib: "stripe", scheme: "stripe", label, secrets: [stripeSecret], now_ms: nowMs, id: `evt_cross${i}`, body: stripeBody,
        headers: { "Stripe-Signature": stripeHeader } });
    }
    const edMsg = Buffer.from(`${id}.${T}.${body}`);
    const edSig = crypto.sign(null, edMsg, edPrivate(b64(edSeed, "whsk_"))).toString("base64");
    const edPub = "whpk_" + crypto.createPublicKey(edPrivate(b64(edSeed, "whsk_"))).export({ format: "der", type: "spki" }).subarray(12).toString("base64");
    out.push({ lib: "node:crypto", scheme: "standard-webhooks-ed25519", label: "at signing", secrets: [edPub], now_ms: T * 1000, id, body,
      headers: { "webhook-id": id, "webhook-timestamp": String(T), "webhook-signature": `v1a,${edSig}` } });
  });
  for (const [i, body] of bodies.entries()) {
    const sig = await octokit.sign(githubSecret, body);
    out.push({ lib: "@octokit/webhooks-methods", scheme: "github", label: "signed", secrets: [githubSecret], now_ms: T * 1000, id: `72d3162e-${i}`, body,
      headers: { "X-Hub-Signature-256": sig, "X-GitHub-Delivery": `72d3162e-${i}` } });
  }
  return out;
}

// verifyOne returns the library's verdict on a ctoken-signed delivery, or
// throws its refusal.
async function verifyOne(c) {
  const h = Object.fromEntries(Object.entries(c.headers).map(([k, v]) => [k.toLowerCase(), v]));
  switch (c.lib) {
    case "standardwebhooks":
      return withClock(c.now_ms, () => new StandardWebhook(c.secret).verify(c.body, h)) !== undefined;
    case "svix":
      return withClock(c.now_ms, () => new SvixWebhook(c.secret).verify(c.body, h)) !== undefined;
    case "stripe": {
      const ev = stripe.webhooks.constructEvent(c.body, h["stripe-signature"], c.secret, 300, undefined, c.now_ms);
      if (ev.id !== c.id) throw new Error(`event id ${ev.id}, want ${c.id}`);
      return true;
    }
    case "@octokit/webhooks-methods":
      if (!(await octokit.verify(c.secret, c.body, h["x-hub-signature-256"]))) throw new Error("signature does not match");
      return true;
    case "@slack/bolt":
      verifySlackRequest({
        signingSecret: c.secret,
        body: c.body,
        headers: { "x-slack-signature": h["x-slack-signature"], "x-slack-request-timestamp": Number(h["x-slack-request-timestamp"]) },
        nowMilliseconds: c.now_ms,
      });
      return true;
    case "node:crypto": {
      const { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sigs } = h;
      const key = edPublic(b64(c.secret, "whpk_"));
      const msg = Buffer.from(`${id}.${ts}.${c.body}`);
      const ok = sigs.split(" ").some((e) => e.startsWith("v1a,") && crypto.verify(null, msg, key, Buffer.from(e.slice(4), "base64")));
      if (!ok) throw new Error("no v1a entry verifies");
      return true;
    }
  }
  throw new Error(`unknown library ${c.lib}`);
}

async function verify() {
  const cases = JSON.parse(fs.readFileSync(0, "utf8"));
  const out = [];
  for (const c of cases) {
    try {
      out.push({ ok: await verifyOne(c), error: "" });
    } catch (e) {
      out.push({ ok: false, error: String(e.message || e).split("\n")[0] });
    }
  }
  return out;
}

function versions() {
  const v = {};
  for (const name of ["standardwebhooks", "svix", "stripe", "@octokit/webhooks-methods", "@slack/bolt"]) {
    v[name] = JSON.parse(fs.readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url))).version;
  }
  v.node = process.version;
  return v;
}

const mode = process.argv[2];
const result = mode === "sign" ? await sign() : mode === "verify" ? await verify() : mode === "versions" ? versions() : null;
if (result === null) {
  console.error("usage: node senders.mjs sign|verify|versions");
  process.exit(2);
}
process.stdout.write(JSON.stringify(result));
