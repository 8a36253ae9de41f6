// The MCP Tasks extension's own client (@modelcontextprotocol/ext-tasks,
// over @modelcontextprotocol/client) against a Go server with ctoken's
// tasks (tasks_test.go). Usage:
//
//   node tasks.mjs <server url> <node_modules folder>
//
// Each step's outcome goes into one JSON object, printed last on stdout;
// the Go test asserts on it. The script asserts nothing itself.
//
// The package needs, for a 2026-07-28 server, a raw request path of the
// host's (rawDispatch): the SDK client's codecs do not take a task result.
// Here it is one fetch POST per request, with the headers the streamable
// HTTP transport sends (MCP-Protocol-Version, Mcp-Method, Mcp-Name) and
// those the package asks for; every raw exchange is kept in obs.wire.

import { pathToFileURL } from 'node:url';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const [url, modules] = process.argv.slice(2);
const mcp = join(modules, '@modelcontextprotocol');
const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(join(mcp, 'client', 'dist', 'index.mjs')).href);
const ext = await import(pathToFileURL(join(mcp, 'ext-tasks', 'dist', 'client', 'index.js')).href);

const endpointId = 'ctoken-tasks-fixture';
const clientInfo = { name: 'ts-tasks-agent', version: '0.0.0' };
const capabilities = { elicitation: { form: {} } };
const obs = { wire: [], inputs: [], backgroundErrors: [] };

// errorOf is what the client surfaced of an error: its class, message,
// JSON-RPC code and data when it has them.
function errorOf(e) {
    return { name: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e), code: e?.code ?? null, data: e?.data ?? null, cause: e?.cause ? String(e.cause?.message ?? e.cause) : null };
}

// outcome runs one call and reports its result or its error.
async function outcome(f) {
    try {
        return { result: (await f()) ?? null };
    } catch (e) {
        return { error: errorOf(e) };
    }
}

// view is a TaskView without its raw copy.
function view(v) {
    if (!v) return null;
    const { raw, extensions, ...rest } = v;
    return rest;
}

// settled is a settlement (or an outcome) as plain JSON.
function settled(o) {
    const out = { status: o.status, task: view(o.task) };
    if (o.status === 'completed') out.result = o.result;
    if (o.status === 'failed') out.error = errorOf(o.error);
    return out;
}

// settle drives an execution to its end, keeping every status it saw.
async function settle(exec) {
    const statuses = [];
    const s = await exec.settle({ onEvent: (e) => { if (e.type === 'task') statuses.push(e.task.status); } });
    return { kind: exec.kind, taskId: exec.handle?.taskId ?? null, statuses, outcome: settled(s.outcome), lastTask: view(s.lastTask) };
}

// rawDispatch returns the host's request path for user: a POST of each
// request, answered by a JSON body or an SSE stream.
function rawDispatch(user, protocolVersion) {
    let seq = 0;
    return async (request, options = {}) => {
        const id = `${user}-${++seq}`;
        const headers = {
            'Content-Type': 'application/json',
            Accept: 'application/json, text/event-stream',
            'MCP-Protocol-Version': protocolVersion,
            'Mcp-Method': request.method,
            ...(request.method === 'tools/call' ? { 'Mcp-Name': request.params.name } : {}),
            ...(options.context?.headers ?? {}),
            'X-Test-User': user,
        };
        const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id, ...request }), signal: options.signal });
        const text = await res.text();
        let msg;
        if ((res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
            for (const line of text.split('\n')) {
                if (!line.startsWith('data:')) continue;
                try {
                    const m = JSON.parse(line.slice(5));
                    if (m.id === id) msg = m;
                } catch {}
            }
        } else {
            try {
                msg = JSON.parse(text);
            } catch {}
        }
        obs.wire.push({ user, request, headers: options.context?.headers ?? null, status: res.status, response: msg ?? text });
        if (!msg || (msg.result === undefined && msg.error === undefined)) {
            throw new ext.DispatchError(`HTTP ${res.status}: no JSON-RPC response: ${text.slice(0, 200)}`);
        }
        return msg.error !== undefined ? { kind: 'error', error: msg.error } : { kind: 'result', result: msg.result };
    };
}

// connect returns a connected SDK client for user and the package's task
// session over it; the session answers every elicitation with confirm:
// true, and keeps what it was asked.
async function connect(user) {
    const client = new Client(clientInfo, { capabilities, versionNegotiation: { mode: 'auto' } });
    const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { 'X-Test-User': user } } });
    await client.connect(transport);
    const protocolVersion = client.getNegotiatedProtocolVersion();
    const session = ext.createTaskSessionFromClient(client, {
        endpointId,
        rawDispatch: rawDispatch(user, protocolVersion),
        v2RequestFraming: { protocolVersion, clientInfo, clientCapabilities: capabilities },
        onInputRequest: async (request, context) => {
            obs.inputs.push({ user, request, context: { scope: context.scope, delivery: context.delivery, taskId: context.taskId ?? null, inputId: context.inputId ?? null } });
            return { action: 'accept', content: { confirm: true } };
        },
        onError: (e) => obs.backgroundErrors.push(errorOf(e)),
    });
    return {
        client,
        session,
        protocolVersion,
        release: (gate) => client.callTool({ name: 'release', arguments: { gate } }),
        close: async () => {
            await session.close();
            await client.close();
        },
    };
}

async function main() {
    const alice = await connect('alice');
    obs.versions = {
        client: JSON.parse(readFileSync(join(mcp, 'client', 'package.json'), 'utf8')).version,
        extTasks: JSON.parse(readFileSync(join(mcp, 'ext-tasks', 'package.json'), 'utf8')).version,
        node: process.version,
        protocol: alice.protocolVersion,
        era: alice.client.getProtocolEra() ?? null,
    };
    obs.capabilities = alice.session.capabilities;

    // 1. A task polled to completed; the result read through the
    // package's own schema.
    obs.complete = await outcome(async () => settle(await alice.session.callTool('compute', { label: 'one' })));
    obs.completeUnwrapped = await outcome(async () => {
        const e = await alice.session.callTool('compute', { label: 'two' });
        return ext.resultFromTaskOutcome(await e.result());
    });

    // 2. An input round: input_required, answered by tasks/update, then
    // completed.
    obs.input = await outcome(async () => settle(await alice.session.callTool('confirm', { file: 'a.txt' })));

    // 3. Cancel of a running task: the client's own view, then the
    // server's, polled to a terminal status by a task controller.
    obs.cancel = await outcome(async () => {
        const e = await alice.session.callTool('slow', { seconds: 30 });
        const taskId = e.handle?.taskId ?? null;
        const ack = await outcome(() => e.cancel());
        const local = settled(await e.result());
        const ctl = alice.session.task(taskId);
        const afterAck = await outcome(async () => view(await ctl.snapshot()));
        const server = await outcome(async () => settled(await ctl.result()));
        return { kind: e.kind, taskId, ack, local, afterAck, server };
    });

    // 4. Resume by ID: one client starts a task and hands it off; a fresh
    // client of the same caller resumes it and polls it to its end.
    obs.resume = await outcome(async () => {
        const e = await alice.session.callTool('gated', { gate: 'resume' });
        let ref;
        await e.handoff((r) => {
            ref = r;
        });
        const handedOff = settled(await e.result());
        const again = await connect('alice');
        try {
            const r = await again.session.resumeTask(ref);
            const before = await outcome(async () => view(await again.session.task(ref.taskId).snapshot()));
            await again.release('resume');
            return { ref, handedOff, before, resumed: await settle(r) };
        } finally {
            await again.close();
        }
    });

    // 5. Another caller with the task's ID is refused; the task goes on.
    const bob = await connect('bob');
    obs.foreign = await outcome(async () => {
        const e = await alice.session.callTool('gated', { gate: 'foreign' });
        const taskId = e.handle?.taskId ?? null;
        const ctl = bob.session.task(taskId);
        const get = await outcome(async () => view(await ctl.snapshot()));
        const cancel = await outcome(() => ctl.cancel());
        const update = await outcome(() => ctl.update({ confirm: { action: 'accept', content: { confirm: true } } }));
        const ownerAfter = await outcome(async () => view(await alice.session.task(taskId).snapshot()));
        await alice.release('foreign');
        return { taskId, get, cancel, update, ownerAfter, owner: await settle(e) };
    });

    // 6. A tool that fails (a JSON-RPC error) ends failed with an error; a
    // tool error (isError) is a completed task.
    obs.failing = await outcome(async () => settle(await alice.session.callTool('failing', {})));
    obs.failingUnwrapped = await outcome(async () => {
        const e = await alice.session.callTool('failing', {});
        return ext.resultFromTaskOutcome(await e.result());
    });
    obs.toolError = await outcome(async () => settle(await alice.session.callTool('tool_error', {})));

    await bob.close();
    await alice.close();
}

try {
    await main();
} catch (e) {
    obs.fatal = errorOf(e);
    process.exitCode = 1;
} finally {
    console.log(JSON.stringify(obs));
}
