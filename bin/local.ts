import { join, resolve } from 'node:path';
import { startGateway } from './local/runtime.ts';
import { ensureDevelopmentProject } from './local/seed.ts';

/**
 * `npm start`: the whole gateway on this machine. Data lives under DATA_DIR (default .data), so a restart keeps
 * developers, projects and usage.
 */
const port = Number(process.env.PORT ?? 8787);
const dataDir = resolve(process.env.DATA_DIR ?? '.data');
/**
 * The period of the schedule functions (the vessel reconciler, the session sweeper), in whole seconds, instead of
 * their minute: with a short LEASE_TTL_SECONDS, a crash's leases and heartbeats lapse in seconds, and the crash tests
 * (test/vessels/crash.test.ts, test/sessions/crash.test.ts) want them found as soon.
 */
const scheduleSeconds = process.env.LOCAL_SCHEDULE_INTERVAL_SECONDS;
if (scheduleSeconds !== undefined && !/^[1-9]\d*$/.test(scheduleSeconds)) {
  console.error(`LOCAL_SCHEDULE_INTERVAL_SECONDS must be a positive whole number of seconds, got "${scheduleSeconds}"`);
  process.exit(1);
}
const scheduleIntervalMs = scheduleSeconds === undefined ? undefined : Number(scheduleSeconds) * 1000;

const localIamOff = process.env.LOCAL_IAM === 'off';

async function main() {
  if (localIamOff) console.log('LOCAL_IAM=off: the functions’ store and queue calls are not checked against their grants (bench only).');
  console.log('Starting the prompt gateway (DynamoDB Local, fauxqs, the scheduler stand-in, handlers)…');
  const gw = await startGateway({
    port,
    dataDir,
    dynamoPort: process.env.DYNAMODB_PORT ? Number(process.env.DYNAMODB_PORT) : undefined,
    // One readable line per request, so a newcomer sees what each client sent and what it was answered.
    accessLog: (line) => console.log(line),
    accessLogJson: process.env.LOCAL_ACCESS_LOG === 'json',
    scheduleIntervalMs,
    // The bench only (bench/run.ts): see startGateway's `localIam`.
    ...(localIamOff ? { localIam: false } : {}),
  });
  const dev = await ensureDevelopmentProject({ simulated: gw.simulated });

  const lines = [
    '',
    `Prompt gateway ready on ${gw.url}`,
    `  channeling URL (Anthropic Messages API): ${gw.url}   → POST /v1/messages`,
    `  conjure URL: ${gw.url}   → GET /usage, POST /prompt (agent runs), POST /incubate (background runs: vessels)`,
    `  health: ${gw.url}/health`,
    `  data: ${dataDir} (DynamoDB Local on ${gw.dynamoEndpoint})`,
    `  vessels: the executor polls the run queue; the reconciler runs at start-up and ${scheduleSeconds === undefined ? 'every minute' : `every ${scheduleSeconds} s`}`,
    gw.simulated
      ? '  upstream: SIMULATED — ANTHROPIC_API_KEY is not set, so answers come from the built-in simulated Anthropic/OpenAI servers, not real models.'
      : `  upstream: Anthropic at ${process.env.ANTHROPIC_BASE_URL ?? 'https://api.anthropic.com'} with your ANTHROPIC_API_KEY`,
    '',
    `${dev.created ? 'Created' : 'Using'} development developer "${dev.developerId}" and project "${dev.projectId}".`,
    `Development token (user "${dev.userId}", $${dev.budget.ai / 1e6} AI per ${dev.budget.window}, valid 30 days):`,
    '',
    dev.token,
    '',
    'Try it:',
    `  curl -s ${gw.url}/usage -H "Authorization: Bearer ${dev.token}"`,
    '',
    `  curl -s ${gw.url}/v1/messages -H "x-api-key: ${dev.token}" -H "anthropic-version: 2023-06-01" \\`,
    `    -H "content-type: application/json" -d '{"model":"claude-sonnet-4-6","max_tokens":256,"messages":[{"role":"user","content":"Hello"}]}'`,
    '',
    `  curl -s ${gw.url}/prompt -H "content-type: application/json" -d '{"message":"Hello","options":{"token":"${dev.token}"}}'`,
    '',
    `  curl -s ${gw.url}/incubate -H "content-type: application/json" -d '{"message":"Hello later","idempotencyKey":"try-1","options":{"token":"${dev.token}"}}'`,
    `  curl -s ${gw.url}/incubate/vessel/<vesselId from the answer> -H "Authorization: Bearer ${dev.token}"`,
    '',
    '  // Anthropic SDK (TypeScript)',
    `  const client = new Anthropic({ baseURL: '${gw.url}', apiKey: '<token above>' });`,
    `  const msg = await client.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 256, messages: [{ role: 'user', content: 'Hello' }] });`,
    '',
    `  # Claude Code: ANTHROPIC_BASE_URL=${gw.url} ANTHROPIC_AUTH_TOKEN=<token above> claude`,
    ...(gw.websocket
      ? [
          '',
          `  # /ws sessions (docs/ws.md): connect to ${gw.websocket.url}?token=<token above>, then send`,
          `  #   {"type":"session.start","options":{}}  and, once the "session" frame is back,  {"type":"user","message":"Hello"}`,
        ]
      : []),
    '',
    `The token is also saved in ${join(dataDir, 'dev-token.txt')}. Press Ctrl-C to stop.`,
  ];
  console.log(lines.join('\n'));

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`\n${signal}: stopping…`);
    await gw.stop();
    console.log('Stopped.');
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
}

main().catch((err: unknown) => {
  console.error(`Could not start the gateway: ${(err as Error).message}`);
  process.exit(1);
});
