// The official TypeScript MCP client (@modelcontextprotocol/client, v2)
// against the Go fixture of tsclient_test.go. Usage:
//
//   node client.mjs <server url> <node_modules folder>
//
// Each step's outcome (a result, or the error the client surfaced with its
// JSON-RPC code and data) goes into one JSON object, printed last on
// stdout; the Go test asserts on it. The script asserts nothing itself and
// exits non-zero when a step the next ones depend on failed (the object
// is printed all the same).

import { pathToFileURL } from 'node:url';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const [url, modules] = process.argv.slice(2);
const pkg = join(modules, '@modelcontextprotocol', 'client');
const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(join(pkg, 'dist', 'index.mjs')).href);

const obs = {};

// outcome runs one call and reports its result or its error.
async function outcome(f) {
    try {
        return { result: await f() };
    } catch (e) {
        return { error: { name: e?.constructor?.name ?? typeof e, code: e?.code ?? null, message: String(e?.message ?? e), data: e?.data ?? null } };
    }
}

// connect returns a connected client for user, with versionNegotiation
// mode (undefined: the client's default) and, when elicit is set, an
// elicitation handler that answers {answer: "yes"}.
async function connect(user, mode, { elicit = false, autoFulfill = true } = {}) {
    const opts = { capabilities: elicit ? { elicitation: { form: {} } } : {} };
    if (mode) opts.versionNegotiation = { mode };
    if (!autoFulfill) opts.inputRequired = { autoFulfill: false };
    const client = new Client({ name: 'ts-agent', version: '0.0.0' }, opts);
    if (elicit) {
        client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { answer: 'yes' } }));
    }
    const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { 'X-Test-User': user } } });
    await client.connect(transport);
    return client;
}

// main runs the steps; obs is printed whatever happens, so that the Go
// test shows what ran before a failure.
async function main() {
    const legacy = await connect('alice');
    const alice = await connect('alice', 'auto', { elicit: true });
    const aliceManual = await connect('alice', 'auto', { elicit: true, autoFulfill: false });
    const bob = await connect('bob', 'auto', { elicit: true });
    obs.versions = {
        client: JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')).version,
        node: process.version,
        legacyProtocol: legacy.getNegotiatedProtocolVersion(),
        autoProtocol: alice.getNegotiatedProtocolVersion(),
    };

    // 1. The idempotent tool: the first response is lost after the tool ran;
    // the same call again (same key) gets the first result.
    const pay = (c, key, amount, tool = 'pay') => outcome(() => c.callTool({ name: tool, arguments: { key, amount } }));
    obs.payLost = await pay(alice, 'lost-1', 5);
    obs.payRetry = await pay(alice, 'lost-1', 5);
    obs.payRetryAgain = await pay(alice, 'lost-1', 5);
    obs.payChanged = await pay(alice, 'lost-1', 6);
    obs.payOtherCaller = await pay(bob, 'lost-1', 5);
    // Two calls under one key at once: the server holds the first until the
    // other has been refused as in progress.
    obs.payConcurrent = await Promise.all([pay(alice, 'dup-1', 5, 'pay_held'), pay(aliceManual, 'dup-1', 5, 'pay_held')]);

    // 2. The two-round tool, auto-fulfilled: the client answers the
    // elicitation and echoes the sealed state itself.
    obs.deployLegacy = await outcome(() => legacy.callTool({ name: 'deploy_raw', arguments: { target: 'legacy' } }));
    obs.deployAuto = await outcome(() => alice.callTool({ name: 'deploy_raw', arguments: { target: 'auto' } }));

    // Round by round (manual mode): round two's response is lost after the
    // deploy ran; the client sends the same round two again.
    const first = await aliceManual.callTool({ name: 'deploy_raw', arguments: { target: 'lost' } }, { allowInputRequired: true });
    obs.deployFirstRound = first;
    obs.deployState = first.requestState ?? null;
    const inputResponses = { confirm: { action: 'accept', content: { answer: 'yes' } } };
    const round2 = (c, args) => outcome(() => c.callTool({ name: 'deploy_raw', arguments: args, inputResponses, requestState: first.requestState }, { allowInputRequired: true }));
    obs.deployLost = await round2(aliceManual, { target: 'lost' });
    obs.deployRetry = await round2(aliceManual, { target: 'lost' });
    obs.deployRetryAgain = await round2(aliceManual, { target: 'lost' });
    obs.deployChanged = await round2(aliceManual, { target: 'other' });
    const bobManual = await connect('bob', 'auto', { elicit: true, autoFulfill: false });
    obs.deployOtherCaller = await round2(bobManual, { target: 'lost' });

    // The typed callTool, with the tool's output schema known from tools/list:
    // manual mode's input_required result has no structured content.
    obs.typedManualNoListTools = await outcome(() => bobManual.callTool({ name: 'deploy', arguments: { target: 'typed-manual' } }, { allowInputRequired: true }));
    await aliceManual.listTools();
    obs.typedManualWithOutputSchema = await outcome(() => aliceManual.callTool({ name: 'deploy', arguments: { target: 'typed-manual' } }, { allowInputRequired: true }));
    // The untyped request has no output validation: round one comes back.
    obs.typedManualViaRequest = await outcome(() => aliceManual.request({ method: 'tools/call', params: { name: 'deploy', arguments: { target: 'typed-request' } } }, { allowInputRequired: true }));
    await alice.listTools();
    obs.typedAutoWithOutputSchema = await outcome(() => alice.callTool({ name: 'deploy', arguments: { target: 'typed' } }));

    // 3. tools/list with ctoken's sealed cursors.
    obs.listAll = (await alice.listTools()).tools.map((t) => t.name);
    obs.listPaged = [];
    obs.listCursors = [];
    let cursor;
    let pages = 0;
    do {
        // listTools() without a cursor walks every page itself; the first
        // page alone is a plain tools/list request.
        const page = cursor === undefined ? await alice.request({ method: 'tools/list', params: {} }) : await alice.listTools({ cursor });
        pages++;
        obs.listPaged.push(...page.tools.map((t) => t.name));
        cursor = page.nextCursor;
        if (cursor !== undefined) obs.listCursors.push(cursor);
    } while (cursor !== undefined && pages < 20);
    obs.listPages = pages;
    const c1 = obs.listCursors[0];
    const i = Math.floor(c1.length / 2);
    const tampered = c1.slice(0, i) + (c1[i] === 'A' ? 'B' : 'A') + c1.slice(i + 1);
    obs.listTampered = await outcome(() => alice.listTools({ cursor: tampered }));
    obs.listOtherCaller = await outcome(() => bob.listTools({ cursor: c1 }));

    for (const c of [legacy, alice, aliceManual, bob, bobManual]) await c.close();
}

try {
    await main();
} finally {
    console.log(JSON.stringify(obs));
}
