import { startAnthropicUpstream } from '../bin/local/upstreams/anthropic.ts';

/** The simulated Anthropic upstream in its own process, so the benchmark's load generator does not share its loop. */
const upstream = await startAnthropicUpstream();
process.stdout.write(`${upstream.url}\n`);
process.on('SIGTERM', () => void upstream.close().then(() => process.exit(0)));
